// Per-device library handles of the CUDA backend: one cuBLASLt handle and one cuDNN handle per
// device, created on first use and kept for the life of the process.
// Leaves out: binding to a stream (cuBLASLt takes the stream per call; cuDNN callers bind the
// current stream with cudnnSetStream before each call, see dnn_handle()).
#pragma once

#include <cstddef>

#include <cublasLt.h>
#include <cudnn.h>

namespace loom::cuda {

// The most workspace a cuBLASLt matmul may ask for. Hopper's fastest kernels want up to 32 MiB;
// a call allocates only what its chosen algorithm needs, from the caching allocator.
constexpr size_t kLtMaxWorkspaceBytes = size_t(32) << 20;

cublasLtHandle_t lt_handle(int device);

// The calling thread's cuDNN handle of `device`, bound to that device's current stream.
cudnnHandle_t dnn_handle(int device);

}  // namespace loom::cuda
