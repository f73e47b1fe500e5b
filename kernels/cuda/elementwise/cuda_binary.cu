// CUDA binary ops: tensor-tensor with broadcasting, tensor-scalar (either order) and in place,
// through the launcher of kernels/cuda/loops.cuh with the functors of kernels/functors.h, for
// every dtype the CPU backend accepts (comparisons return bool).
// Leaves out: unary ops and where (cuda_elementwise.cu).
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/elementwise_ops.h"

namespace loom::cuda {

// The host side of these three is kernels/elementwise_ops.h, shared with the CPU backend.
// a, b: shapes that broadcast together -> the broadcast shape (bool for comparisons)
Tensor CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  return elementwise_ops::binary<CudaLoop>(op, a, b);
}

// a: any shape -> same shape
Tensor CudaBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  return elementwise_ops::binary_scalar<CudaLoop>(op, a, s, scalar_first);
}

// a: any shape and strides, b: broadcasts to a -> a = op(a, b) in place
void CudaBackend::binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  elementwise_ops::binary_<CudaLoop>(op, a, b);
}

}  // namespace loom::cuda
