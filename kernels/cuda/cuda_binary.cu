// CUDA binary ops: tensor-tensor with broadcasting, tensor-scalar (either order) and in place,
// through the launcher of kernels/cuda/loops.cuh with the functors of kernels/functors.h, for
// every dtype the CPU backend accepts (comparisons return bool).
// Leaves out: unary ops and where (cuda_elementwise.cu).
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/op_dispatch.h"

namespace loom::cuda {

namespace {

// f(a, s) or f(s, a) with the scalar already in the accumulate type.
template <typename F, typename A>
struct ScalarOp {
  F f;
  A s;
  bool scalar_first;
  LOOM_HOST_DEVICE auto operator()(A x) const { return scalar_first ? f(s, x) : f(x, s); }
};

// out = f(a, b) (or f(a, s)) for the dtype of a; the output is bool for comparisons.
template <typename F>
void run_binary(const char* name, const Tensor& out, const Tensor& a, const Tensor* b, double s,
                bool scalar_first, F f) {
  check_numeric_op(name, F::floating_only, a.dtype());
  LOOM_DISPATCH_NUMERIC(a.dtype(), name, [&] {
    using acc = acc_t<scalar_t>;
    if constexpr (F::floating_only && !std::is_floating_point_v<acc>) {
      return;
    } else {
      using Out = std::conditional_t<F::returns_bool, bool, scalar_t>;
      if constexpr (std::is_same_v<F, DivOp> && !std::is_floating_point_v<acc>) {
        LOOM_FAIL(name, ": integer division is not supported (convert to a floating dtype first)");
      } else if (b) {
        elementwise<Out, scalar_t, scalar_t>(out, f, a, *b);
      } else {
        elementwise<Out, scalar_t>(out, ScalarOp<F, acc>{f, acc(s), scalar_first}, a);
      }
    }
  });
}

}  // namespace

// a, b: shapes that broadcast together -> the broadcast shape (bool for comparisons)
Tensor CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(op_name(op), a.shape(), b.shape());
  Tensor out = empty(shape, {.dtype = returns_bool(op) ? DType::Bool : a.dtype(), .device = a.device()});
  with_binary_functor(op, [&](auto f) { run_binary(op_name(op), out, a, &b, 0, false, f); });
  return out;
}

// a: any shape -> same shape
Tensor CudaBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  Tensor out = empty(a.shape(), {.dtype = returns_bool(op) ? DType::Bool : a.dtype(), .device = a.device()});
  with_binary_functor(op, [&](auto f) { run_binary(op_name(op), out, a, nullptr, s, scalar_first, f); });
  return out;
}

// a: any shape and strides, b: broadcasts to a -> a = op(a, b) in place
void CudaBackend::binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(!returns_bool(op), op_name(op), "_: comparisons have no in-place form");
  with_binary_functor(op, [&](auto f) { run_binary(op_name(op), a, a, &b, 0, false, f); });
}

}  // namespace loom::cuda
