// Storage: a refcounted block of device memory shared by a tensor and all its views, with the
// version counter that autograd uses to detect in-place changes of saved tensors.
// Leaves out: the shape of the data (TensorImpl holds sizes/strides/offset).
#pragma once

#include <cstdint>
#include <memory>

#include "core/allocator.h"

namespace loom {

struct Storage {
  DataPtr data;
  size_t nbytes = 0;
  Device device;
  // Bumped by every in-place write; shared by all views because they share the storage.
  uint64_t version = 0;

  Storage(DataPtr d, size_t n, Device dev) : data(std::move(d)), nbytes(n), device(dev) {}
  void* ptr() const { return data.get(); }
};

inline std::shared_ptr<Storage> make_storage(size_t nbytes, Device d) {
  return std::make_shared<Storage>(allocator_for(d).allocate(nbytes), nbytes, d);
}

}  // namespace loom
