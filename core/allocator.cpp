// The 64-byte-aligned CPU allocator and the allocator registry.
#include "core/allocator.h"

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/error.h"
#include "core/out_of_memory.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/allocator.h"
#endif

namespace loom {

namespace {

std::atomic<uint64_t> g_cpu_allocations{0}, g_cpu_bytes{0}, g_cpu_live{0}, g_cpu_peak{0};

// The bytes the C library gave for p (0 where it cannot say).
uint64_t usable_size(void* p) {
#ifdef __GLIBC__
  return malloc_usable_size(p);
#else
  (void)p;
  return 0;
#endif
}

void count_live(void* p) {
  const uint64_t now =
      g_cpu_live.fetch_add(usable_size(p), std::memory_order_relaxed) + usable_size(p);
  uint64_t peak = g_cpu_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void free_counted(void* q) {
  g_cpu_live.fetch_sub(usable_size(q), std::memory_order_relaxed);
  std::free(q);
}

// The limit of set_cpu_memory_limit, first read from LOOM_CPU_MEMORY_LIMIT (a bad value is an
// error at every allocation until it is fixed: the static is initialised again each time).
std::atomic<uint64_t>& limit_bytes() {
  static std::atomic<uint64_t> limit{[] {
    const char* env = std::getenv("LOOM_CPU_MEMORY_LIMIT");
    return env ? parse_memory_size(env) : 0;
  }()};
  return limit;
}

// Throws for a request of nbytes that would take the live bytes over `limit`, or (limit 0) that
// aligned_alloc could not serve.
[[noreturn]] void out_of_memory(size_t nbytes, uint64_t limit) {
  OutOfMemoryNumbers n;
  n.device = "cpu";
  n.requested = nbytes;
  n.allocated = g_cpu_live.load(std::memory_order_relaxed);
  n.peak_allocated = g_cpu_peak.load(std::memory_order_relaxed);
  n.limit = limit;
  n.cause = "aligned_alloc returned null";
  throw OutOfMemoryError(n);
}

// Note [CPU memory reuse]
// glibc serves blocks over 128 KiB with fresh mmap()s and returns them on free, so every large
// tensor of every step page-faults its memory in again (about 1.5 ms of an 11 ms 1024^3 matmul).
// Raising the mmap and trim thresholds keeps freed blocks in the heap for reuse: the cheapest
// caching allocator there is, and the OS still gets memory back beyond 1 GiB of free heap.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 512 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  }
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    const uint64_t limit = limit_bytes().load(std::memory_order_relaxed);
    if (limit && (rounded > limit || g_cpu_live.load(std::memory_order_relaxed) > limit - rounded))
      out_of_memory(nbytes, limit);
    void* p = std::aligned_alloc(kCpuAlignment, rounded);
    if (p == nullptr) out_of_memory(nbytes, 0);
    g_cpu_allocations.fetch_add(1, std::memory_order_relaxed);
    g_cpu_bytes.fetch_add(nbytes, std::memory_order_relaxed);
    count_live(p);
    return DataPtr(p, &free_counted);
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

CpuAllocStats cpu_alloc_stats() {
  return {g_cpu_allocations.load(std::memory_order_relaxed),
          g_cpu_bytes.load(std::memory_order_relaxed), g_cpu_live.load(std::memory_order_relaxed),
          g_cpu_peak.load(std::memory_order_relaxed)};
}

void reset_cpu_peak() {
  g_cpu_peak.store(g_cpu_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void set_cpu_memory_limit(size_t bytes) { limit_bytes().store(bytes, std::memory_order_relaxed); }

size_t cpu_memory_limit() { return limit_bytes().load(std::memory_order_relaxed); }

size_t parse_memory_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty()) shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  // 19 digits always fit in 64 bits; the check after the shift catches the rest.
  const uint64_t n = digits > 0 && digits <= 19 ? std::stoull(text.substr(0, digits)) : 0;
  const bool fits = digits > 0 && digits <= 19 && shift >= 0 && n <= (SIZE_MAX >> shift);
  LOOM_CHECK(fits, "LOOM_CPU_MEMORY_LIMIT='", text,
             "': expected a byte count, or a number with the suffix K, M or G (KiB, MiB, GiB), "
             "e.g. 512M; 0 means no limit");
  return size_t(n) << shift;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
#ifdef LOOM_WITH_CUDA
  return cuda_caching_allocator(d.index);
#else
  LOOM_FAIL("allocator_for(", d,
            "): this build of loom has no CUDA support (configure with -DLOOM_CUDA=ON)");
#endif
}

}  // namespace loom
