// Pinned (page-locked) host memory for fast, asynchronous host-to-device copies: CPU tensors whose
// storage comes from cudaHostAlloc, cached by size so that a DataLoader can take a fresh buffer
// per batch cheaply. See Note [Pinned memory] in core/cuda/host_allocator.cpp.
// Leaves out: registering existing memory (cudaHostRegister) and write-combined memory.
#pragma once

#include <cuda_runtime.h>

#include "core/allocator.h"
#include "core/tensor.h"

namespace loom::cuda {

// The allocator of pinned host memory (blocks rounded up to a power of two, cached when freed).
Allocator& pinned_allocator();

// An uninitialised contiguous CPU tensor in pinned memory.
Tensor pinned_empty(const Shape& shape, DType dtype = DType::F32);

// True if `ptr` lies in page-locked host memory (from pinned_allocator or any cudaHostAlloc).
bool is_pinned(const void* ptr);
bool is_pinned(const Tensor& t);

// An asynchronous copy on `stream` reads or writes the pinned block that starts at `base` (a
// storage's base pointer): the block is not handed out again until that copy has completed.
// Does nothing for pointers that pinned_allocator did not return.
void record_pinned_use(const void* base, cudaStream_t stream);

struct PinnedStats {
  size_t allocated = 0;          // bytes in live pinned blocks
  size_t cached = 0;             // bytes in free blocks kept for reuse
  uint64_t num_host_allocs = 0;  // cudaHostAlloc calls
};
PinnedStats pinned_stats();
void empty_pinned_cache();  // cudaFreeHost for every cached block whose copies are done

}  // namespace loom::cuda
