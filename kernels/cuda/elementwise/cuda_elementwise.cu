// CUDA elementwise ops: unary and where, through the launcher of kernels/cuda/loops.cuh with the
// functors of kernels/functors.h, for every dtype the CPU backend accepts.
// Leaves out: binary ops (cuda_binary.cu, a file of their own so the two compile in parallel),
// copies, fills and random numbers (cuda_copy.cu).
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/elementwise_ops.h"

namespace loom::cuda {

// The host side of unary and where is kernels/elementwise_ops.h, shared with the CPU backend.
// x: any shape -> same shape and dtype (contiguous)
Tensor CudaBackend::unary(UnaryOp op, const Tensor& x) {
  return elementwise_ops::unary<CudaLoop>(op, x);
}

// cond (bool), a, b: broadcast together -> a's dtype
Tensor CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return elementwise_ops::where<CudaLoop>(cond, a, b);
}

}  // namespace loom::cuda
