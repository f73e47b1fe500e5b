// Allocator: the interface every device's memory manager implements, and the registry that finds
// the allocator of a device. The CPU allocator (64-byte aligned) lives here; the CUDA caching
// allocator in core/cuda/allocator.h.
// Leaves out: caching on the CPU (aligned_alloc is fast enough for host tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/device.h"

namespace loom {

// Owning pointer to raw device memory; the deleter returns it to its allocator.
using DataPtr = std::unique_ptr<void, std::function<void(void*)>>;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t nbytes) = 0;
};

constexpr size_t kCpuAlignment = 64;  // a cache line, and enough for any SIMD load

Allocator& cpu_allocator();

// Counts of the CPU allocator's work since the program started: an instrumentation hook for tests
// that check an optimisation skips work (e.g. mm's backward not computing a product nobody needs
// allocates nothing the size of that product). Relaxed atomics: exact when one thread allocates.
// live_bytes and peak_live_bytes count what the C library hands out (malloc_usable_size, glibc;
// 0 elsewhere): the memory tensors hold now, and the most they held at once since the start or
// the last reset_cpu_peak() (activation checkpointing's test reads it).
struct CpuAllocStats {
  uint64_t allocations = 0;  // calls that returned memory (nbytes > 0)
  uint64_t bytes = 0;        // sum of the requested sizes
  uint64_t live_bytes = 0;
  uint64_t peak_live_bytes = 0;
};
CpuAllocStats cpu_alloc_stats();
void reset_cpu_peak();

// A ceiling on the CPU allocator's live bytes (0: none, the default): an allocation that would
// take live_bytes above it throws loom::OutOfMemoryError (core/out_of_memory.h) with the CPU's
// numbers (requested, live, peak, the limit) instead of allocating. It simulates running out of
// memory, e.g. to see a program's error path. The environment variable LOOM_CPU_MEMORY_LIMIT
// sets it when the CPU allocator is first used (bytes, or with the suffix K, M or G: 512M);
// set_cpu_memory_limit overrides it. Counted as live_bytes is, so only with glibc; elsewhere only
// a single request larger than the limit fails. Without a limit, an aligned_alloc that fails
// throws the same error.
void set_cpu_memory_limit(size_t bytes);
size_t cpu_memory_limit();
// LOOM_CPU_MEMORY_LIMIT's syntax: "1048576", "64K", "512M", "2G" (binary units); an error
// naming the text for anything else or a size over 64 bits.
size_t parse_memory_size(const std::string& text);

// The allocator for a device: the CPU one, or the CUDA caching allocator
// (core/cuda/allocator.cpp, compiled only when loom is built with CUDA).
Allocator& allocator_for(Device d);

}  // namespace loom
