// The 64-byte-aligned CPU allocator and the allocator registry.
#include "core/allocator.h"

#include <cstdlib>

#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda_allocator.h"
#endif

namespace loom {

namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    LOOM_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    return DataPtr(p, [](void* q) { std::free(q); });
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
#ifdef LOOM_WITH_CUDA
  return cuda_caching_allocator(d.index);
#else
  LOOM_FAIL("allocator_for(", d, "): this build of loom has no CUDA support (configure with -DLOOM_CUDA=ON)");
#endif
}

}  // namespace loom
