// The pinned host allocator (see Note [Pinned memory]).
// Leaves out: per-NUMA-node pools.
#include "core/cuda/host_allocator.h"

#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace loom::cuda {
namespace {

// Note [Pinned memory]
// The GPU's copy engines read page-locked host memory directly, so a copy from it can run
// asynchronously with the host (cudaMemcpyAsync returns at once). cudaHostAlloc is slow (it
// locks pages, milliseconds for large sizes), so freed blocks are cached by size, rounded up to a
// power of two. A block may still be read by an asynchronous copy when its tensor is freed (the
// DataLoader pattern: collate, copy, drop): copy_ calls record_pinned_use, which records an event
// on the copy's stream, and a freed block is handed out again only after its events completed.

size_t round_pow2(size_t n) {
  size_t p = 4096;
  while (p < n) p <<= 1;
  return p;
}

struct HostBlock {
  size_t size = 0;
  void* ptr = nullptr;
  bool allocated = false;
  std::vector<cudaEvent_t> events;  // copies that use the block
};

class PinnedAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
    size_t size = round_pow2(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    process_events();
    HostBlock* b = nullptr;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      b = it->second.back();
      it->second.pop_back();
      stats_.cached -= size;
    } else {
      void* p = nullptr;
      cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
      if (err != cudaSuccess) {
        cudaGetLastError();
        LOOM_FAIL("pinned_empty: cudaHostAlloc of ", size, " bytes failed: ", cudaGetErrorName(err),
                  " (", cudaGetErrorString(err), ")");
      }
      b = new HostBlock;
      b->size = size;
      b->ptr = p;
      blocks_[p] = b;
      ++stats_.num_host_allocs;
    }
    b->allocated = true;
    stats_.allocated += size;
    return DataPtr(b->ptr, [this](void* p) { free(p); });
  }

  void free(void* p) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return;
    HostBlock* b = it->second;
    b->allocated = false;
    stats_.allocated -= b->size;
    if (b->events.empty()) {
      free_[b->size].push_back(b);
      stats_.cached += b->size;
    } else {
      pending_.push_back(b);
    }
  }

  void record_use(const void* base, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(const_cast<void*>(base));
    if (it == blocks_.end()) return;
    cudaEvent_t e = nullptr;
    if (!event_cache_.empty()) {
      e = event_cache_.back();
      event_cache_.pop_back();
    } else {
      LOOM_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess,
                 "record_pinned_use: cudaEventCreate failed");
    }
    cudaError_t err = cudaEventRecord(e, s);
    LOOM_CHECK(err == cudaSuccess,
               "record_pinned_use: cudaEventRecord failed: ", cudaGetErrorName(err));
    it->second->events.push_back(e);
  }

  PinnedStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    process_events();
    for (auto& [size, list] : free_) {
      for (HostBlock* b : list) {
        cudaFreeHost(b->ptr);
        blocks_.erase(b->ptr);
        stats_.cached -= b->size;
        delete b;
      }
      list.clear();
    }
  }

 private:
  // Drops completed events; blocks freed with no events left become reusable.
  void process_events() {
    auto done = [&](HostBlock* b) {
      std::vector<cudaEvent_t> left;
      for (cudaEvent_t e : b->events) {
        cudaError_t st = cudaEventQuery(e);
        if (st == cudaErrorNotReady) {
          cudaGetLastError();
          left.push_back(e);
        } else {
          event_cache_.push_back(e);
        }
      }
      b->events.swap(left);
      return b->events.empty();
    };
    for (auto& [p, b] : blocks_)
      if (b->allocated && !b->events.empty()) done(b);  // keep live blocks' lists short
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (done(*it)) {
        free_[(*it)->size].push_back(*it);
        stats_.cached += (*it)->size;
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mu_;
  std::unordered_map<void*, HostBlock*> blocks_;
  std::map<size_t, std::vector<HostBlock*>> free_;
  std::deque<HostBlock*> pending_;
  std::vector<cudaEvent_t> event_cache_;
  PinnedStats stats_;
};

PinnedAllocator& pinned() {
  static PinnedAllocator* a = new PinnedAllocator;  // never destroyed (see core/cuda/allocator.cpp)
  return *a;
}

}  // namespace

Allocator& pinned_allocator() { return pinned(); }

Tensor pinned_empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape) LOOM_CHECK(d >= 0, "pinned_empty: negative size in shape ", shape);
  size_t nbytes = size_t(numel(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(pinned().allocate(nbytes), nbytes, kCPU);
  return Tensor(
      std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

bool is_pinned(const void* ptr) {
  if (ptr == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

bool is_pinned(const Tensor& t) {
  return t.defined() && t.device().is_cpu() && is_pinned(t.storage()->ptr());
}

void record_pinned_use(const void* base, cudaStream_t stream) { pinned().record_use(base, stream); }

PinnedStats pinned_stats() { return pinned().stats(); }
void empty_pinned_cache() { pinned().empty_cache(); }

}  // namespace loom::cuda
