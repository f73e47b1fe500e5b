// CUDA elementwise ops: unary and where, through the launcher of kernels/cuda/loops.cuh with the
// functors of kernels/functors.h, for every dtype the CPU backend accepts; and the backend object.
// Leaves out: binary ops (cuda_binary.cu, a file of their own so the two compile in parallel),
// copies, fills and random numbers (cuda_copy.cu).
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/op_dispatch.h"

namespace loom::cuda {

CudaBackend& cuda_backend() {
  static CudaBackend* b = new CudaBackend;
  return *b;
}

namespace {

struct WhereOp {
  template <typename T>
  LOOM_HOST_DEVICE T operator()(bool c, T x, T y) const { return c ? x : y; }
};

}  // namespace

// x: any shape -> same shape and dtype (contiguous)
Tensor CudaBackend::unary(UnaryOp op, const Tensor& x) {
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  with_unary_functor(op, [&](auto f) {
    check_numeric_op(op_name(op), decltype(f)::floating_only, x.dtype());
    LOOM_DISPATCH_NUMERIC(x.dtype(), op_name(op), [&] {
      if constexpr (decltype(f)::floating_only && !std::is_floating_point_v<acc_t<scalar_t>>) return;
      else elementwise<scalar_t, scalar_t>(out, f, x);
    });
  });
  return out;
}

// cond (bool), a, b: broadcast together -> a's dtype
Tensor CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  LOOM_DISPATCH_ALL(a.dtype(), "where", [&] {
    elementwise<scalar_t, bool, scalar_t, scalar_t>(out, WhereOp{}, cond, a, b);
  });
  return out;
}

}  // namespace loom::cuda
