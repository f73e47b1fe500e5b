// Checking macros for CUDA runtime, cuBLAS, cuDNN and NCCL calls: a failure throws loom::Error
// naming the call, the status and file:line.
// Leaves out: recovery (an error in a kernel leaves the context unusable; we report and stop).
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define LOOM_CUDA_CHECK(call)                                          \
  do {                                                                 \
    cudaError_t loom_err_ = (call);                                    \
    if (loom_err_ != cudaSuccess)                                      \
      LOOM_FAIL(#call, " failed: ", cudaGetErrorName(loom_err_), " (", \
                cudaGetErrorString(loom_err_), ")");                   \
  } while (0)

// After a kernel launch: reports launch-configuration errors at once (not asynchronous faults).
#define LOOM_CUDA_CHECK_LAUNCH(kernel_name)                                                \
  do {                                                                                     \
    cudaError_t loom_err_ = cudaGetLastError();                                            \
    if (loom_err_ != cudaSuccess)                                                          \
      LOOM_FAIL("launch of ", kernel_name, " failed: ", cudaGetErrorName(loom_err_), " (", \
                cudaGetErrorString(loom_err_), ")");                                       \
  } while (0)
