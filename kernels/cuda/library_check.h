// Checking macros for the cuBLAS(Lt) and cuDNN calls of the CUDA backend: a failure throws
// loom::Error naming the call, the library's status name and its description, with file:line.
// Leaves out: CUDA runtime checks (core/cuda/check.h) and NCCL (distributed/).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include "core/error.h"

#define LOOM_CUBLAS_CHECK(call)                                          \
  do {                                                                   \
    cublasStatus_t loom_st_ = (call);                                    \
    if (loom_st_ != CUBLAS_STATUS_SUCCESS)                               \
      LOOM_FAIL(#call, " failed: ", cublasGetStatusName(loom_st_), " (", \
                cublasGetStatusString(loom_st_), ")");                   \
  } while (0)

#define LOOM_CUDNN_CHECK(call)                                                                 \
  do {                                                                                         \
    cudnnStatus_t loom_st_ = (call);                                                           \
    if (loom_st_ != CUDNN_STATUS_SUCCESS)                                                      \
      LOOM_FAIL(#call, " failed: ", cudnnGetErrorString(loom_st_), " (status ", int(loom_st_), \
                ")");                                                                          \
  } while (0)
