// CPU elementwise kernels: copy (with dtype conversion), fill, arange, random, and the unary,
// binary and ternary ops of kernels/functors.h, all through the iterator in kernels/cpu/loops.h.
#include <cmath>

#include "core/dispatch.h"
#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/loops.h"
#include "kernels/op_dispatch.h"

namespace loom::cpu {

CpuBackend& cpu_backend() {
  static CpuBackend b;
  return b;
}

void CpuBackend::copy_(const Tensor& dst, const Tensor& src) {
  LOOM_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
    using dst_t = scalar_t;
    LOOM_DISPATCH_ALL(src.dtype(), "copy_", [&] {
      elementwise<dst_t, scalar_t>(dst, [](acc_t<scalar_t> v) { return v; }, src);
    });
  });
}

void CpuBackend::fill_(const Tensor& t, double value) {
  LOOM_DISPATCH_ALL(t.dtype(), "fill_", [&] {
    scalar_t v = scalar_t(acc_t<scalar_t>(value));
    elementwise<scalar_t>(t, [v]() { return v; });
  });
}

void CpuBackend::arange_(const Tensor& t, double start, double step) {
  LOOM_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    scalar_t* p = t.data<scalar_t>();
    parallel_for(0, t.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = scalar_t(acc_t<scalar_t>(start + double(i) * step));
    });
  });
}

void CpuBackend::random_(const Tensor& t, RandomKind kind, double a, double b, uint64_t seed,
                         uint64_t offset) {
  LOOM_DISPATCH_NUMERIC(t.dtype(), "random_", [&] {
    scalar_t* p = t.data<scalar_t>();
    bool f64 = t.dtype() == DType::F64 || kind == RandomKind::Int;
    parallel_for(0, t.numel(), kGrainSize / 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        double v;
        switch (kind) {
          case RandomKind::Uniform: v = a + (b - a) * philox_uniform(seed, offset, i, f64); break;
          case RandomKind::Normal: v = a + b * philox_normal(seed, offset, i); break;
          default: v = a + std::floor(philox_uniform(seed, offset, i, true) * (b - a)); break;
        }
        p[i] = scalar_t(acc_t<scalar_t>(v));
      }
    });
  });
}

Tensor CpuBackend::unary(UnaryOp op, const Tensor& x) {
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

namespace {

// out = f(a, b) (or f(a, s)) for the dtype of a; Out is bool for comparisons.
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
        acc sv = acc(s);
        if (scalar_first) elementwise<Out, scalar_t>(out, [=](acc x) { return f(sv, x); }, a);
        else elementwise<Out, scalar_t>(out, [=](acc x) { return f(x, sv); }, a);
      }
    }
  });
}

}  // namespace

Tensor CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(op_name(op), a.shape(), b.shape());
  Tensor out = empty(shape, {.dtype = returns_bool(op) ? DType::Bool : a.dtype(), .device = a.device()});
  with_binary_functor(op, [&](auto f) { run_binary(op_name(op), out, a, &b, 0, false, f); });
  return out;
}

Tensor CpuBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  Tensor out = empty(a.shape(), {.dtype = returns_bool(op) ? DType::Bool : a.dtype(), .device = a.device()});
  with_binary_functor(op, [&](auto f) { run_binary(op_name(op), out, a, nullptr, s, scalar_first, f); });
  return out;
}

void CpuBackend::binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(!returns_bool(op), op_name(op), "_: comparisons have no in-place form");
  with_binary_functor(op, [&](auto f) { run_binary(op_name(op), a, a, &b, 0, false, f); });
}

Tensor CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  Tensor out = empty(shape, {.dtype = a.dtype(), .device = a.device()});
  LOOM_DISPATCH_ALL(a.dtype(), "where", [&] {
    using acc = acc_t<scalar_t>;
    elementwise<scalar_t, bool, scalar_t, scalar_t>(
        out, [](bool c, acc x, acc y) { return c ? x : y; }, cond, a, b);
  });
  return out;
}

}  // namespace loom::cpu
