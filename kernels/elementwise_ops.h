// The host side of the elementwise Backend methods, written once for both backends: output shape
// and dtype, the op -> functor switch, the dtype switch, and the errors (integer division, a
// floating-only op on integers, in-place comparisons). Each backend instantiates these with its
// own loop (kernels/cpu/loops.h, kernels/cuda/loops.cuh) and keeps nothing else.
// Leaves out: the loops themselves (strides, broadcasting, threads or launches).
#pragma once

#include <initializer_list>
#include <type_traits>

#include "core/dispatch.h"
#include "core/tensor.h"
#include "core/tensor_views.h"
#include "kernels/functors.h"
#include "kernels/op_dispatch.h"

namespace loom::elementwise_ops {

// Loop is a backend's loop as a type:
//   struct Loop { template <typename Out, typename... Ins, typename F, typename... Ts>
//                 static void run(const Tensor& out, const F& f, const Ts&... in); };
// out[i] = f(in[i]...) with inputs broadcast to out's shape and converted to their acc_t.

// f(a, s) or f(s, a) with the scalar already in the accumulate type.
template <typename F, typename A>
struct ScalarOp {
  F f;
  A s;
  bool scalar_first;
  LOOM_HOST_DEVICE auto operator()(A x) const { return scalar_first ? f(s, x) : f(x, s); }
};

struct WhereOp {
  template <typename T>
  LOOM_HOST_DEVICE T operator()(bool c, T x, T y) const {
    return c ? x : y;
  }
};

// Note [Elementwise output layout]
// An elementwise result is contiguous, except that it is channels-last when its first operand of
// the result's shape is (Note [Channels-last] in core/tensor_views.h): so a residual add or a
// ReLU between channels-last convolutions stays channels-last, and walks its operands as one
// flat run (kernels/loop_geometry.h) instead of a strided loop followed by a copy back to
// channels-last before the next convolution. PyTorch's TensorIterator follows its inputs' layout
// in the same way.
inline Tensor empty_result(const Shape& shape, DType dtype, Device device,
                           std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    if (t->shape() == shape) {
      if (raw::is_channels_last(*t))
        return raw::empty_channels_last(shape, {.dtype = dtype, .device = device});
      break;
    }
  return empty(shape, {.dtype = dtype, .device = device});
}

// x: any shape -> same shape and dtype (contiguous, or channels-last like x)
template <typename Loop>
Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor out = empty_result(x.shape(), x.dtype(), x.device(), {&x});
  with_unary_functor(op, [&](auto f) {
    check_numeric_op(op_name(op), decltype(f)::floating_only, x.dtype());
    LOOM_DISPATCH_NUMERIC(x.dtype(), op_name(op), [&] {
      if constexpr (decltype(f)::floating_only && !std::is_floating_point_v<acc_t<scalar_t>>)
        return;
      else
        Loop::template run<scalar_t, scalar_t>(out, f, x);
    });
  });
  return out;
}

// out = f(a, b) (or f(a, s)) for the dtype of a; the output is bool for comparisons.
template <typename Loop, typename F>
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
        Loop::template run<Out, scalar_t, scalar_t>(out, f, a, *b);
      } else {
        Loop::template run<Out, scalar_t>(out, ScalarOp<F, acc>{f, acc(s), scalar_first}, a);
      }
    }
  });
}

// a, b: shapes that broadcast together -> the broadcast shape (bool for comparisons)
template <typename Loop>
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(op_name(op), a.shape(), b.shape());
  Tensor out =
      empty_result(shape, returns_bool(op) ? DType::Bool : a.dtype(), a.device(), {&a, &b});
  with_binary_functor(op, [&](auto f) { run_binary<Loop>(op_name(op), out, a, &b, 0, false, f); });
  return out;
}

// a: any shape -> same shape (bool for comparisons)
template <typename Loop>
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  Tensor out =
      empty_result(a.shape(), returns_bool(op) ? DType::Bool : a.dtype(), a.device(), {&a});
  with_binary_functor(
      op, [&](auto f) { run_binary<Loop>(op_name(op), out, a, nullptr, s, scalar_first, f); });
  return out;
}

// a: any shape and strides, b: broadcasts to a -> a = op(a, b) in place
template <typename Loop>
void binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(!returns_bool(op), op_name(op), "_: comparisons have no in-place form");
  with_binary_functor(op, [&](auto f) { run_binary<Loop>(op_name(op), a, a, &b, 0, false, f); });
}

// cond (bool), a, b: broadcast together -> a's dtype
template <typename Loop>
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape =
      broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  Tensor out = empty_result(shape, a.dtype(), a.device(), {&cond, &a, &b});
  LOOM_DISPATCH_ALL(a.dtype(), "where", [&] {
    Loop::template run<scalar_t, bool, scalar_t, scalar_t>(out, WhereOp{}, cond, a, b);
  });
  return out;
}

}  // namespace loom::elementwise_ops
