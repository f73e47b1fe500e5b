// Checking macros for the cuBLAS(Lt) and cuDNN calls of the CUDA backend: a failure throws
// loom::Error naming the call, the library's status name and its description, with file:line.
// Leaves out: CUDA runtime checks (core/cuda/check.h, whose LOOM_STATUS_CHECK these use) and NCCL
// (distributed/).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <string>

#include "core/cuda/check.h"
#include "core/error.h"

namespace loom::cuda {
// "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)".
inline std::string cublas_status_text(cublasStatus_t s) {
  return str(cublasGetStatusName(s), " (", cublasGetStatusString(s), ")");
}
// "CUDNN_STATUS_BAD_PARAM (status 2000)": cuDNN's name of the status and its number.
inline std::string cudnn_status_text(cudnnStatus_t s) {
  return str(cudnnGetErrorString(s), " (status ", int(s), ")");
}
}  // namespace loom::cuda

#define LOOM_CUBLAS_CHECK(call) \
  LOOM_STATUS_CHECK(#call, call, CUBLAS_STATUS_SUCCESS, ::loom::cuda::cublas_status_text)
#define LOOM_CUDNN_CHECK(call) \
  LOOM_STATUS_CHECK(#call, call, CUDNN_STATUS_SUCCESS, ::loom::cuda::cudnn_status_text)
