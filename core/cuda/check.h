// Checking macros for CUDA runtime calls, and the status check the library checks of
// kernels/cuda/library_check.h are written with: a failure throws loom::Error naming the call,
// the status and file:line.
// Leaves out: recovery (an error in a kernel leaves the context unusable; we report and stop).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

// LOOM_STATUS_CHECK(what, call, ok, describe): evaluates `call` once; when the status it returns
// is not `ok`, throws "<what> failed: <describe(status)>".
#define LOOM_STATUS_CHECK(what, call, ok, describe)                                 \
  do {                                                                              \
    const auto loom_status_ = (call);                                               \
    if (loom_status_ != (ok)) LOOM_FAIL(what, " failed: ", describe(loom_status_)); \
  } while (0)

namespace loom::cuda {
// "cudaErrorInvalidValue (invalid argument)": the error's name and description.
inline std::string error_text(cudaError_t e) {
  return str(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(call) LOOM_STATUS_CHECK(#call, call, cudaSuccess, ::loom::cuda::error_text)

// After a kernel launch: reports launch-configuration errors at once (not asynchronous faults).
#define LOOM_CUDA_CHECK_LAUNCH(kernel_name)                                                  \
  LOOM_STATUS_CHECK(::loom::str("launch of ", kernel_name), cudaGetLastError(), cudaSuccess, \
                    ::loom::cuda::error_text)
