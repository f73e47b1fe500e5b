// CPU RMS norm over the last dim, forward and backward (Backend::rms_norm and rms_norm_backward,
// the fused section of kernels/backend_methods.inc): plain loops, one row at a time, rows in
// parallel, sums in double; the naive version CUDA's kernels are tested against. grad_weight's
// column sums run over the rows in order, each thread owning a block of columns, so the result
// does not depend on the thread count.
// Leaves out: SIMD intrinsics, and the residual add and output casts that layer norm fuses.
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

namespace {

// A value of T as double (through float for the 16-bit types), and back.
template <typename T>
double to_double(T v) {
  return double(acc_t<T>(v));
}
template <typename T>
T from_double(double v) {
  return T(acc_t<T>(v));
}

// y = w * round_x(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps), for rows [lo, hi) of x (M, N).
// X: x's type; W: weight's and y's (X or float); S: rstd's (double for double x, else float).
template <typename X, typename W, typename S>
void rms_norm_rows(const X* x, const W* w, W* y, S* rstd, int64_t N, double eps, int64_t lo,
                   int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const X* r = x + i * N;
    double q = 0;
    for (int64_t j = 0; j < N; ++j) q += to_double(r[j]) * to_double(r[j]);
    const double rs = 1.0 / std::sqrt(q / double(N) + eps);
    rstd[i] = S(rs);
    for (int64_t j = 0; j < N; ++j) {
      const double h = to_double(from_double<X>(to_double(r[j]) * rs));  // rounded to x's dtype
      y[i * N + j] = from_double<W>(w ? to_double(w[j]) * h : h);
    }
  }
}

// dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd, for rows [lo, hi).
template <typename X, typename W, typename S>
void rms_norm_backward_rows(const W* dy, const X* x, const W* w, const S* rstd, X* dx, int64_t N,
                            int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const double rs = double(rstd[i]);
    double s = 0;
    for (int64_t j = 0; j < N; ++j) {
      const double g = to_double(dy[i * N + j]) * (w ? to_double(w[j]) : 1.0);
      s += g * to_double(x[i * N + j]) * rs;
    }
    s /= double(N);
    for (int64_t j = 0; j < N; ++j) {
      const double g = to_double(dy[i * N + j]) * (w ? to_double(w[j]) : 1.0);
      const double xhat = to_double(x[i * N + j]) * rs;
      dx[i * N + j] = from_double<X>(rs * (g - xhat * s));
    }
  }
}

// dw[j] = sum_i dy[i, j] round_x(x[i, j] rstd[i]) for columns [lo, hi), rows in order.
template <typename X, typename W, typename S>
void rms_norm_weight_grad(const W* dy, const X* x, const S* rstd, W* dw, int64_t M, int64_t N,
                          int64_t lo, int64_t hi) {
  std::vector<double> acc(size_t(hi - lo), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    const double rs = double(rstd[i]);
    for (int64_t j = lo; j < hi; ++j) {
      const double h = to_double(from_double<X>(to_double(x[i * N + j]) * rs));
      acc[size_t(j - lo)] += to_double(dy[i * N + j]) * h;
    }
  }
  for (int64_t j = lo; j < hi; ++j) dw[j] = from_double<W>(acc[size_t(j - lo)]);
}

// f(X{}, W{}, S{}) for x's dtype, weight's (x's or float32; x's without a weight) and the
// statistics' (double for double x, float otherwise).
template <typename F>
void with_rms_norm_types(const Tensor& x, const Tensor& w, const F& f) {
  LOOM_DISPATCH_FLOATING(x.dtype(), "rms_norm", [&] {
    using X = scalar_t;
    using S = std::conditional_t<std::is_same_v<X, double>, double, float>;
    if (w.defined() && w.dtype() != x.dtype())
      f(X{}, float{}, S{});
    else
      f(X{}, X{}, S{});
  });
}

int64_t row_grain(int64_t N) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N, 1)); }

}  // namespace

// x: (M, N) contiguous; weight: (N) or undefined -> y (M, N) in weight's dtype, rstd (M)
RmsNormOut CpuBackend::rms_norm(const Tensor& x, const Tensor& w, double eps) {
  const DType y_dtype = check_rms_norm_args("rms_norm", x, w);
  const int64_t M = x.size(0), N = x.size(1);
  RmsNormOut o{empty({M, N}, {.dtype = y_dtype}),
               empty({M}, {.dtype = rms_norm_stat_dtype(x.dtype())})};
  with_rms_norm_types(x, w, [&](auto xt, auto wt, auto st) {
    using X = decltype(xt);
    using W = decltype(wt);
    using S = decltype(st);
    parallel_for(0, M, row_grain(N), [&](int64_t lo, int64_t hi) {
      rms_norm_rows<X, W, S>(x.data<X>(), data_or_null<W>(w), o.y.data<W>(), o.rstd.data<S>(), N,
                             eps, lo, hi);
    });
  });
  return o;
}

// dy: (M, N) in y's dtype; x, weight, rstd: the forward's -> dx (M, N), dw (N)
RmsNormGrads CpuBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                           const Tensor& rstd, bool need_weight) {
  check_rms_norm_backward_args(dy, x, w, rstd);
  const int64_t M = x.size(0), N = x.size(1);
  RmsNormGrads g{empty({M, N}, {.dtype = x.dtype()}), Tensor()};
  LOOM_CHECK(!need_weight || w.defined(), "rms_norm_backward: grad_weight asked for without a ",
             "weight; x ", describe(x));
  if (need_weight) g.grad_weight = empty({N}, {.dtype = w.dtype()});
  with_rms_norm_types(x, w, [&](auto xt, auto wt, auto st) {
    using X = decltype(xt);
    using W = decltype(wt);
    using S = decltype(st);
    const W* pdy = dy.data<W>();
    parallel_for(0, M, row_grain(N), [&](int64_t lo, int64_t hi) {
      rms_norm_backward_rows<X, W, S>(pdy, x.data<X>(), data_or_null<W>(w), rstd.data<S>(),
                                      g.grad_input.data<X>(), N, lo, hi);
    });
    if (need_weight)
      parallel_for(0, N, 1, [&](int64_t lo, int64_t hi) {
        rms_norm_weight_grad<X, W, S>(pdy, x.data<X>(), rstd.data<S>(), g.grad_weight.data<W>(), M,
                                      N, lo, hi);
      });
  });
  return g;
}

}  // namespace loom::cpu
