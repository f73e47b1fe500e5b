// Storage: a refcounted block of device memory shared by a tensor and all its views, with the
// version counter that autograd uses to detect in-place changes of saved tensors.
// Leaves out: the shape of the data (TensorImpl holds sizes/strides/offset).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/allocator.h"

namespace loom::autograd {
class Recompute;
}

namespace loom {

// Note [Released storage]
// A storage's memory may be released while the Storage object lives on (data null, nbytes kept)
// and allocated again later: every tensor and view over it, and every tensor autograd saved,
// then sees the new memory. FSDP (distributed/fsdp/fsdp.h) frees a unit's gathered parameters
// so between its uses. Reading a tensor whose storage is released is an error naming it
// (Tensor::data_ptr), never a read of freed memory.
struct Storage {
  DataPtr data;
  size_t nbytes = 0;
  Device device;
  // Bumped by every in-place write; shared by all views because they share the storage.
  uint64_t version = 0;

  Storage(DataPtr d, size_t n, Device dev) : data(std::move(d)), nbytes(n), device(dev) {}
  void* ptr() const { return data.get(); }
  // Who released it, for the error (e.g. "FSDP unit 'h.0' (h.0.ln_1.weight, ...)").
  std::string released_by;
  bool released() const { return data == nullptr && nbytes > 0; }
  void release() { data.reset(); }
  void reallocate() { data = allocator_for(device).allocate(nbytes); }
  // How the op that wrote it can write it again (Note [Recomputed activations],
  // autograd/recompute.h); null for most storages.
  std::shared_ptr<autograd::Recompute> recompute;
};

inline std::shared_ptr<Storage> make_storage(size_t nbytes, Device d) {
  return std::make_shared<Storage>(allocator_for(d).allocate(nbytes), nbytes, d);
}

}  // namespace loom
