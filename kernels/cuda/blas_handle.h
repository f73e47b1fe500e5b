// Library handles of the CUDA backend: one cuBLASLt handle per device (shared by all threads) and
// one cuDNN handle per device and thread, created on first use and kept until exit.
// Leaves out: the stream of a cuBLASLt call (passed per call); dnn_handle() binds the current
// stream each time it is asked, so a cuDNN call right after it runs on that stream.
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include <cstddef>

namespace loom::cuda {

// The most workspace a cuBLASLt matmul may ask for. Hopper's fastest kernels want up to 32 MiB;
// a call allocates only what its chosen algorithm needs, from the caching allocator.
constexpr size_t kLtMaxWorkspaceBytes = size_t(32) << 20;

cublasLtHandle_t lt_handle(int device);

// The calling thread's cuDNN handle of `device`, bound to that device's current stream.
cudnnHandle_t dnn_handle(int device);

}  // namespace loom::cuda
