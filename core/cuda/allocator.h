// The CUDA caching allocator: one per device, handing out device memory from cached cudaMalloc
// segments (size classes, block splitting, per-stream pools, record_stream, OOM retry, stats,
// private pools for CUDA graph capture). See Note [Caching allocator] in core/cuda/allocator.cpp.
// Leaves out: pinned host memory (core/cuda/host_allocator.h) and expandable segments.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/cuda/available.h"
#include "core/tensor.h"

namespace loom {

// The caching allocator of CUDA device `device` (an error naming the device if it does not exist).
Allocator& cuda_caching_allocator(int device);

}  // namespace loom

namespace loom::cuda {

// MemoryStats, memory_stats and reset_peak_memory_stats are declared in core/cuda/available.h.

// Returns every cached segment that holds no live block to CUDA (all devices). An error while a
// CUDA graph is being captured on a device (cudaFree would synchronise).
void empty_cache();

// Marks the memory of `t` (a CUDA tensor) as used by `stream`, which need not be the stream it was
// allocated on: when the tensor is freed, its block is reused only after the work queued on
// `stream` up to that moment has finished (an event is recorded there at free time).
void record_stream(const Tensor& t, cudaStream_t stream);
// The same for a data pointer returned by the allocator (a storage's base pointer).
void record_stream(const void* ptr, cudaStream_t stream);

// ---- private pools for CUDA graph capture (core/cuda/graph.h) ----
// While a capture on `stream` is active, allocations made on that stream come from a new private
// pool; blocks freed during the capture return to it and may be reused later in the same capture.
// After end_pool_capture the pool stays reserved for the graph's replays until release_pool.
using PoolId = uint64_t;
PoolId begin_pool_capture(int device, cudaStream_t stream);
void end_pool_capture(int device, PoolId pool);
// The graph is gone: its pool's memory is returned as soon as the last block in it is freed.
void release_pool(int device, PoolId pool);
bool capture_underway(int device);  // a pool capture is active on the device

}  // namespace loom::cuda
