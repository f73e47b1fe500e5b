// loom::OutOfMemoryError: what an allocator throws when it cannot serve a request, the CUDA
// caching allocator (core/cuda/allocator.cpp) and the CPU allocator (core/allocator.cpp, under a
// memory limit or when the C library fails). It carries the numbers, and its one message names
// them and what to try (Note [Out of memory]). Leaves out: catching it (train::run_main prints it
// and exits with status 1) and std::bad_alloc from std containers.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.h"

namespace loom {

// The allocator's numbers at the failure, in bytes. "allocated" is what live tensors hold (the
// CUDA allocator's rounded blocks; the CPU allocator's live bytes), "peak_allocated" its most
// since the start or the last reset of the peak.
struct OutOfMemoryNumbers {
  std::string device;             // "cuda:0" or "cpu"
  size_t requested = 0;           // the size asked for
  size_t allocated = 0;           // held by live tensors
  size_t reserved = 0;            // CUDA: cudaMalloc'ed segments (allocated + cached); CPU: 0
  size_t largest_free_block = 0;  // CUDA: the largest cached free block after the retry
  size_t peak_allocated = 0;      // the most allocated at once
  size_t device_free = 0;         // CUDA: cudaMemGetInfo's free bytes (0 with device_total 0:
  size_t device_total = 0;        //   unknown, during a CUDA graph capture)
  size_t limit = 0;               // CPU: the memory limit that was hit (0: none, malloc failed)
  std::string cause;              // the call that failed and its answer, in words
};

class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(OutOfMemoryNumbers numbers);
  const OutOfMemoryNumbers& numbers() const { return numbers_; }

 private:
  OutOfMemoryNumbers numbers_;
};

// The message of an OutOfMemoryError with these numbers.
std::string out_of_memory_message(const OutOfMemoryNumbers& n);
// A byte count with three significant digits in the largest binary unit under 1024 of it:
// "512 B", "3.00 MiB", "10.3 GiB", "140 GiB".
std::string format_bytes(size_t bytes);

}  // namespace loom
