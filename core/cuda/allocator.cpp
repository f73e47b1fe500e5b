// The CUDA caching allocator (see Note [Caching allocator]).
// Leaves out: expandable segments, fragmentation limits (max_split_size) and memory snapshots.
#include "core/cuda/allocator.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/out_of_memory.h"

namespace loom {
namespace cuda {
namespace {

// Note [Caching allocator]
// cudaMalloc and cudaFree are slow (cudaFree synchronises the device), so memory is taken from
// CUDA in segments and kept. Requests round up to 512 bytes. Requests up to 1 MiB are "small":
// they come from 2 MiB segments; larger ones from 20 MiB segments (requests under 10 MiB) or
// from a segment of their own size rounded up to 2 MiB. A free block that is larger than the
// request is split, and the remainder stays free (small pool: if at least 512 B remain; large
// pool: if more than 1 MiB remains). A freed block merges with free neighbours of its segment.
//
// Streams: every block belongs to the stream it was allocated on, and free blocks are looked up
// by (stream, size), so a block is only reused by work on the same stream, where stream order
// makes reuse safe without any synchronisation. A block used on another stream must be marked
// with record_stream; freeing it then records an event on each such stream, and the block
// returns to its pool only once those events have completed (polled at the next allocation).
//
// Out of memory: if cudaMalloc fails, the allocator waits for the pending events, returns every
// wholly free cached segment to CUDA and tries once more; if that fails too it throws
// loom::OutOfMemoryError naming the request, the bytes allocated and reserved by loom, the
// largest free cached block, the peak, the device's free and total memory, and what to try
// (Note [Out of memory] in core/out_of_memory.cpp).
//
// CUDA graphs: during a capture, allocations on the capturing stream come from a private pool
// (begin_pool_capture). A graph replays fixed addresses, so its memory must never be handed to
// anyone else while the graph lives; inside the capture, blocks freed and reallocated are
// reused in stream order, which the replay preserves. During a capture nothing may synchronise:
// events are not polled (frees with record_stream are deferred until no capture is underway),
// cudaFree is never called, and cudaMalloc runs in the relaxed capture mode.

constexpr size_t kMinBlock = 512;               // every size is a multiple of this
constexpr size_t kSmallSize = size_t(1) << 20;  // requests up to 1 MiB use the small pool
constexpr size_t kSmallSegment = size_t(2) << 20;
constexpr size_t kMinLargeAlloc = size_t(10) << 20;
constexpr size_t kLargeSegment = size_t(20) << 20;
constexpr size_t kRoundLarge = size_t(2) << 20;

size_t round_size(size_t n) {
  return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock;
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallSegment;
  if (size < kMinLargeAlloc) return kLargeSegment;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

struct Pool;

struct Block {
  cudaStream_t stream = nullptr;
  size_t size = 0;       // rounded size of this block
  size_t requested = 0;  // bytes asked for (allocated blocks)
  char* ptr = nullptr;
  Pool* pool = nullptr;
  bool small = false;      // from a small-pool segment (fixed for the segment's life)
  bool allocated = false;  // handed out, or freed but waiting for events
  Block* prev = nullptr;   // neighbours within the segment
  Block* next = nullptr;
  std::vector<cudaStream_t> stream_uses;  // streams other than `stream` (record_stream)
  int pending_events = 0;
  bool whole_segment() const { return prev == nullptr && next == nullptr; }
};

struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return uintptr_t(a->stream) < uintptr_t(b->stream);
    if (a->size != b->size) return a->size < b->size;
    return uintptr_t(a->ptr) < uintptr_t(b->ptr);
  }
};

// Free blocks of one pool, small and large. The default pool has id 0; graph pools 1, 2, ...
struct Pool {
  PoolId id = 0;
  std::set<Block*, BlockOrder> small, large;
  size_t segments = 0;    // live cudaMalloc segments of this pool
  bool released = false;  // a graph pool whose graph is gone
  std::set<Block*, BlockOrder>& set_of(const Block* b) { return b->small ? small : large; }
};

class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}

  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
    cudaStream_t stream = current_stream(device_);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    if (captures_.empty()) process_events();
    size_t size = round_size(nbytes);
    Pool& pool = pool_for(stream);
    Block* b = find_free(pool, stream, size);
    if (!b) b = new_segment(pool, stream, size, nbytes);
    b = split(b, size);
    b->allocated = true;
    b->requested = nbytes;
    live_[b->ptr] = b;
    stats_.allocated += b->size;
    stats_.requested += nbytes;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    return DataPtr(b->ptr, [this](void* p) { free(p); });
  }

  // Called by the DataPtr deleter: must never throw.
  void free(void* p) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours (cannot happen through DataPtr)
    Block* b = it->second;
    live_.erase(it);
    stats_.allocated -= b->size;
    stats_.requested -= b->requested;
    if (b->stream_uses.empty()) return free_block(b);
    if (!captures_.empty()) {
      deferred_.push_back(b);  // events may not be recorded and polled during a capture
      return;
    }
    insert_events(b);
  }

  void record_stream(const void* p, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(const_cast<void*>(p));
    LOOM_CHECK(it != live_.end(), "record_stream: pointer ", p,
               " was not allocated by the caching allocator of cuda:", device_,
               " (or was already freed)");
    Block* b = it->second;
    if (s == b->stream) return;
    if (std::find(b->stream_uses.begin(), b->stream_uses.end(), s) == b->stream_uses.end())
      b->stream_uses.push_back(s);
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated = stats_.allocated;
    stats_.peak_reserved = stats_.reserved;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    LOOM_CHECK(
        captures_.empty(), "empty_cache: a CUDA graph is being captured on cuda:", device_,
        "; releasing memory would synchronise the device (call it before or after the capture)");
    release_cached();
  }

  PoolId begin_capture(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    PoolId id = next_pool_id_++;
    auto pool = std::make_unique<Pool>();
    pool->id = id;
    pools_[id] = std::move(pool);
    captures_.push_back({s, id});
    return id;
  }

  void end_capture(PoolId id) {
    std::lock_guard<std::mutex> lock(mu_);
    captures_.erase(
        std::remove_if(captures_.begin(), captures_.end(), [&](auto& c) { return c.second == id; }),
        captures_.end());
    if (captures_.empty()) {
      for (Block* b : deferred_) insert_events(b);
      deferred_.clear();
    }
  }

  void release_pool(PoolId id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    it->second->released = true;
    if (captures_.empty()) release_free_segments(*it->second);
    if (it->second->segments == 0) pools_.erase(it);
  }

  bool capturing() {
    std::lock_guard<std::mutex> lock(mu_);
    return !captures_.empty();
  }

 private:
  Pool& pool_for(cudaStream_t s) {
    for (auto& [stream, id] : captures_)
      if (stream == s) return *pools_.at(id);
    return default_pool_;
  }

  Block* find_free(Pool& pool, cudaStream_t s, size_t size) {
    auto& set = size <= kSmallSize ? pool.small : pool.large;
    Block key;
    key.stream = s;
    key.size = size;
    key.ptr = nullptr;
    auto it = set.lower_bound(&key);
    if (it == set.end() || (*it)->stream != s) return nullptr;
    Block* b = *it;
    set.erase(it);
    return b;
  }

  // cudaMalloc in the relaxed capture mode, so that it is allowed while this thread captures.
  cudaError_t raw_malloc(void** p, size_t size) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    int prev = -1;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    cudaError_t err = cudaMalloc(p, size);
    if (prev != device_ && prev >= 0) cudaSetDevice(prev);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess) cudaGetLastError();  // clear it: we retry or throw our own error
    return err;
  }

  Block* new_segment(Pool& pool, cudaStream_t s, size_t size, size_t nbytes) {
    size_t seg = segment_size(size);
    void* p = nullptr;
    cudaError_t err = raw_malloc(&p, seg);
    if (err == cudaErrorMemoryAllocation && captures_.empty()) {
      ++stats_.num_ooms;
      release_cached();
      err = raw_malloc(&p, seg);
    }
    if (err == cudaErrorMemoryAllocation) {
      ++stats_.num_ooms;
      out_of_memory(pool, nbytes, seg);
    }
    LOOM_CHECK(err == cudaSuccess, "cudaMalloc of a ", format_bytes(seg),
               " segment on cuda:", device_, " (to allocate ", format_bytes(nbytes),
               "): ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
    Block* b = new Block;
    b->stream = s;
    b->size = seg;
    b->small = size <= kSmallSize;
    b->ptr = static_cast<char*>(p);
    b->pool = &pool;
    ++pool.segments;
    ++stats_.num_segments;
    stats_.reserved += seg;
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    return b;
  }

  // Throws the OutOfMemoryError for a request of nbytes whose segment of seg bytes cudaMalloc
  // refused (after the retry, which is not made during a capture).
  [[noreturn]] void out_of_memory(const Pool& pool, size_t nbytes, size_t seg) {
    OutOfMemoryNumbers n;
    n.device = "cuda:" + std::to_string(device_);
    n.requested = nbytes;
    n.allocated = stats_.allocated;
    n.reserved = stats_.reserved;
    n.largest_free_block = largest_free_block(pool);
    n.peak_allocated = stats_.peak_allocated;
    if (captures_.empty()) device_memory(&n.device_free, &n.device_total);
    n.cause = "cudaMalloc of a " + format_bytes(seg) + " segment: cudaErrorMemoryAllocation" +
              (captures_.empty() ? ", after emptying the cache"
                                 : "; the cache is not emptied during a CUDA graph capture");
    throw OutOfMemoryError(n);
  }

  // cudaMemGetInfo of this allocator's device (0 and 0 if it fails).
  void device_memory(size_t* free_b, size_t* total_b) {
    int prev = -1;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    if (cudaMemGetInfo(free_b, total_b) != cudaSuccess) {
      cudaGetLastError();
      *free_b = *total_b = 0;
    }
    if (prev != device_ && prev >= 0) cudaSetDevice(prev);
  }

  // The largest free block cached in the pool, on any stream (0 when none).
  static size_t largest_free_block(const Pool& pool) {
    size_t largest = 0;
    for (const auto* set : {&pool.small, &pool.large})
      for (const Block* b : *set) largest = std::max(largest, b->size);
    return largest;
  }

  // Cuts `size` bytes off the front of b; the rest goes back to the free set.
  Block* split(Block* b, size_t size) {
    size_t rest = b->size - size;
    bool worth = b->small ? rest >= kMinBlock : rest > kSmallSize;
    if (!worth) return b;
    Block* r = new Block;
    r->stream = b->stream;
    r->size = rest;
    r->small = b->small;
    r->ptr = b->ptr + size;
    r->pool = b->pool;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    r->pool->set_of(r).insert(r);
    return b;
  }

  // Returns b to its pool, merging it with free neighbours.
  void free_block(Block* b) {
    b->allocated = false;
    b->stream_uses.clear();
    Pool& pool = *b->pool;
    for (Block* n : {b->prev, b->next}) {
      if (!n || n->allocated) continue;
      pool.set_of(n).erase(n);
      if (n == b->prev) {
        b->ptr = n->ptr;
        b->prev = n->prev;
        if (b->prev) b->prev->next = b;
      } else {
        b->next = n->next;
        if (b->next) b->next->prev = b;
      }
      b->size += n->size;
      delete n;
    }
    if (pool.released && b->whole_segment() && captures_.empty()) {
      free_segment(b);
      if (pool.segments == 0) pools_.erase(pool.id);
      return;
    }
    pool.set_of(b).insert(b);
  }

  void free_segment(Block* b) {
    cudaFree(b->ptr);  // errors ignored: this also runs from deleters at exit
    cudaGetLastError();
    stats_.reserved -= b->size;
    ++stats_.num_frees_to_cuda;
    --b->pool->segments;
    delete b;
  }

  void insert_events(Block* b) {
    int prev = -1;
    cudaGetDevice(&prev);
    if (prev != device_) cudaSetDevice(device_);
    for (cudaStream_t s : b->stream_uses) {
      cudaEvent_t e = get_event();
      if (e && cudaEventRecord(e, s) == cudaSuccess) {
        ++b->pending_events;
        pending_.push_back({e, b});
      } else {
        cudaGetLastError();
      }
    }
    if (prev != device_ && prev >= 0) cudaSetDevice(prev);
    if (b->pending_events == 0) free_block(b);
  }

  cudaEvent_t get_event() {
    if (!event_cache_.empty()) {
      cudaEvent_t e = event_cache_.back();
      event_cache_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return e;
  }

  // Frees the blocks whose events have completed, oldest first.
  void process_events(bool wait = false) {
    while (!pending_.empty()) {
      auto [e, b] = pending_.front();
      cudaError_t st = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
      if (st == cudaErrorNotReady) {
        cudaGetLastError();
        break;
      }
      if (st != cudaSuccess) cudaGetLastError();
      pending_.pop_front();
      event_cache_.push_back(e);
      if (--b->pending_events == 0) free_block(b);
    }
  }

  void release_free_segments(Pool& pool) {
    for (auto* set : {&pool.small, &pool.large}) {
      for (auto it = set->begin(); it != set->end();) {
        Block* b = *it;
        if (b->whole_segment()) {
          it = set->erase(it);
          free_segment(b);
        } else {
          ++it;
        }
      }
    }
  }

  // Waits for pending events, then returns every wholly free segment to CUDA.
  void release_cached() {
    process_events(/*wait=*/true);
    release_free_segments(default_pool_);
    for (auto it = pools_.begin(); it != pools_.end();) {
      if (it->second->released) release_free_segments(*it->second);
      if (it->second->released && it->second->segments == 0)
        it = pools_.erase(it);
      else
        ++it;
    }
  }

  const int device_;
  std::mutex mu_;
  Pool default_pool_;
  std::map<PoolId, std::unique_ptr<Pool>> pools_;  // graph pools
  PoolId next_pool_id_ = 1;
  std::vector<std::pair<cudaStream_t, PoolId>> captures_;
  std::unordered_map<void*, Block*> live_;
  std::deque<std::pair<cudaEvent_t, Block*>> pending_;
  std::vector<Block*> deferred_;
  std::vector<cudaEvent_t> event_cache_;
  MemoryStats stats_;
};

// One allocator per device, created on first use and never destroyed: tensors that outlive
// static destruction still free into a valid object.
DeviceAllocator& device_allocator(int device) {
  static std::vector<DeviceAllocator*>* all = [] {
    auto* v = new std::vector<DeviceAllocator*>();
    for (int d = 0; d < device_count(); ++d) v->push_back(new DeviceAllocator(d));
    return v;
  }();
  LOOM_CHECK(device_count() > 0, "cuda:", device,
             ": no CUDA device is available (cudaGetDeviceCount found none; ",
             "is there a GPU and a driver?)");
  LOOM_CHECK(device >= 0 && device < int(all->size()), "cuda:", device,
             " does not exist: this machine has ", all->size(), " CUDA device(s)");
  return *(*all)[size_t(device)];
}

}  // namespace

MemoryStats memory_stats(int device) { return device_allocator(device).stats(); }
void reset_peak_memory_stats(int device) { device_allocator(device).reset_peak(); }

void empty_cache() {
  for (int d = 0; d < device_count(); ++d) device_allocator(d).empty_cache();
}

void record_stream(const Tensor& t, cudaStream_t stream) {
  LOOM_CHECK(t.defined() && t.device().is_cuda(), "record_stream: expected a CUDA tensor, got ",
             t.defined() ? describe(t) : std::string("an undefined tensor"));
  if (t.storage()->ptr() == nullptr) return;  // zero bytes
  device_allocator(t.device().index).record_stream(t.storage()->ptr(), stream);
}

void record_stream(const void* ptr, cudaStream_t stream) {
  cudaPointerAttributes attr{};
  LOOM_CHECK(
      cudaPointerGetAttributes(&attr, ptr) == cudaSuccess && attr.type == cudaMemoryTypeDevice,
      "record_stream: pointer ", ptr, " is not CUDA device memory");
  device_allocator(attr.device).record_stream(ptr, stream);
}

PoolId begin_pool_capture(int device, cudaStream_t stream) {
  return device_allocator(device).begin_capture(stream);
}
void end_pool_capture(int device, PoolId pool) { device_allocator(device).end_capture(pool); }
void release_pool(int device, PoolId pool) { device_allocator(device).release_pool(pool); }
bool capture_underway(int device) { return device_allocator(device).capturing(); }

}  // namespace cuda

Allocator& cuda_caching_allocator(int device) { return cuda::device_allocator(device); }

}  // namespace loom
