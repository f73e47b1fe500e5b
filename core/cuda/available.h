// What a program may ask of the CUDA runtime in every build, without CUDA headers: whether CUDA
// is there, how many devices, a device synchronisation and the allocator's memory statistics. A
// build without CUDA answers 0 devices, and the calls that need a device throw loom::Error.
// Leaves out: streams, events, graphs and allocators themselves (core/cuda/stream.h, graph.h,
// allocator.h), which need the CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::cuda {

// The most devices one process addresses (the per-device tables are this long).
constexpr int kMaxCudaDevices = 64;

// True when loom was compiled with its CUDA backend (LOOM_WITH_CUDA).
bool compiled_with_cuda();
// The number of usable CUDA devices: 0 without the CUDA backend, a driver, or a GPU. Never throws.
int device_count();
bool is_available();  // device_count() > 0

// Blocks the host until all work queued on `device`'s current stream is done, then reports
// errors that kernels flagged on the device (core/cuda/device_error.h). An error during capture,
// and in a build without CUDA.
void synchronize(int device);

// Byte counts of one device's caching allocator (core/cuda/allocator.h). "allocated" counts
// blocks handed out (rounded sizes), "reserved" the cudaMalloc'ed segments that hold them and the
// cached free blocks.
struct MemoryStats {
  size_t allocated = 0;
  size_t reserved = 0;
  size_t requested = 0;       // bytes asked for by the live allocations (before rounding)
  size_t peak_allocated = 0;  // since the start or the last reset_peak_memory_stats
  size_t peak_reserved = 0;
  uint64_t num_allocs = 0;         // allocate() calls with a non-zero size
  uint64_t num_segments = 0;       // cudaMalloc calls (allocations the cache could not serve)
  uint64_t num_frees_to_cuda = 0;  // cudaFree calls (empty_cache, OOM retry, released pools)
  uint64_t num_ooms = 0;           // cudaMalloc failures (before or after the retry)
};

// Both throw in a build without CUDA.
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);

// Turn a profiler's collection on and off (cudaProfilerStart / cudaProfilerStop): a profiler
// started with collection off (`ncu --profile-from-start off`, `nsys
// --capture-range=cudaProfilerApi`) then records only the work launched between the two, such as a
// benchmark's timed steps without its warm-up (bench_train --profile-timed). No-ops in a build
// without CUDA or without a device.
void profiler_start();
void profiler_stop();

// Why no CUDA device is usable, in words, from what the runtime answered: cudaGetDeviceCount's
// error code (0 = success with 0 devices), cudaDriverGetVersion's version (0 = no driver
// installed) and the runtime version loom was built with. Tells apart no driver, a driver too old
// for the runtime, and a driver that sees no GPU. Plain ints so that it is testable everywhere.
std::string explain_no_device(int count_error, int driver_version, int runtime_version);
// The error codes it reads (cudaError_t values, stable across CUDA versions).
constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorNoDevice = 100;

}  // namespace loom::cuda
