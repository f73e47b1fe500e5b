// CPU layer norm over the last dim, forward and backward (Backend::layer_norm, the fused section
// of kernels/backend_methods.inc): plain loops, one row at a time, rows in parallel; sums in
// double. The column sums of the backward (grad_weight, grad_bias) run over the rows in order,
// each thread owning a block of columns, so the result does not depend on the thread count.
// The residual add and a 16-bit y or dy (LayerNormExtras), the added gradient and the 16-bit copy
// of dx (LayerNormBackwardExtras) are composed around the loops: the sum and the casts as
// separate passes, the reference for CUDA's fused kernels.
// Leaves out: float16/bfloat16 x (the op casts it to float32 first, as autocast does).
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

void check_layer_norm_input(const char* op, const Tensor& x) {
  LOOM_CHECK(
      x.dim() == 2 && x.is_contiguous() && (x.dtype() == DType::F32 || x.dtype() == DType::F64), op,
      ": x ", describe(x), " should be (M, N) contiguous float32 or float64");
}

// y, mean, rstd of rows [lo, hi) of x (M, N).
template <typename T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t N,
                     double eps, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    const T* r = x + i * N;
    double s = 0, q = 0;
    for (int64_t j = 0; j < N; ++j) s += double(r[j]);
    double mu = s / double(N);
    for (int64_t j = 0; j < N; ++j) q += (double(r[j]) - mu) * (double(r[j]) - mu);
    double rs = 1.0 / std::sqrt(q / double(N) + eps);
    for (int64_t j = 0; j < N; ++j) {
      double v = (double(r[j]) - mu) * rs;
      if (w) v *= double(w[j]);
      if (b) v += double(b[j]);
      y[i * N + j] = T(v);
    }
    mean[i] = T(mu);
    rstd[i] = T(rs);
  }
}

// dx of rows [lo, hi): dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * w.
template <typename T>
void layer_norm_backward_rows(const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                              const T* add, T* dx, int64_t N, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    double mu = double(mean[i]), rs = double(rstd[i]), sg = 0, sgx = 0;
    for (int64_t j = 0; j < N; ++j) {
      double g = double(dy[i * N + j]) * (w ? double(w[j]) : 1.0);
      sg += g;
      sgx += g * (double(x[i * N + j]) - mu) * rs;
    }
    sg /= double(N), sgx /= double(N);
    for (int64_t j = 0; j < N; ++j) {
      double g = double(dy[i * N + j]) * (w ? double(w[j]) : 1.0);
      double xhat = (double(x[i * N + j]) - mu) * rs;
      dx[i * N + j] = T(rs * (g - sg - xhat * sgx)) + (add ? add[i * N + j] : T(0));
    }
  }
}

// dw[j] = sum_i dy[i, j] xhat[i, j] and db[j] = sum_i dy[i, j] for columns [lo, hi): rows in
// order, each row's block of columns added to a double accumulator (reads stay row-contiguous).
template <typename T>
void layer_norm_param_grads(const T* dy, const T* x, const T* mean, const T* rstd, T* dw, T* db,
                            int64_t M, int64_t N, int64_t lo, int64_t hi) {
  std::vector<double> sw(size_t(hi - lo), 0.0), sb(size_t(hi - lo), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    double mu = double(mean[i]), rs = double(rstd[i]);
    for (int64_t j = lo; j < hi; ++j) {
      double d = double(dy[i * N + j]);
      sw[size_t(j - lo)] += d * (double(x[i * N + j]) - mu) * rs;
      sb[size_t(j - lo)] += d;
    }
  }
  for (int64_t j = lo; j < hi; ++j) {
    if (dw) dw[j] = T(sw[size_t(j - lo)]);
    if (db) db[j] = T(sb[size_t(j - lo)]);
  }
}

}  // namespace

// x: (M, N) contiguous f32/f64; extras: residual (M, N), y's dtype -> y, mean, rstd (, sum)
LayerNormOut CpuBackend::layer_norm(const Tensor& x_in, const Tensor& w, const Tensor& b,
                                    double eps, const LayerNormExtras& extras) {
  check_layer_norm_input("layer_norm", x_in);
  const Tensor& res = extras.residual;
  LOOM_CHECK(!res.defined() || (res.shape() == x_in.shape() && res.device() == kCPU),
             "layer_norm: residual ", res.defined() ? describe(res) : std::string(),
             " should be shaped like x ", describe(x_in));
  const Tensor x =
      res.defined() ? binary(BinaryOp::Add, x_in, raw::cast(res, x_in.dtype())) : x_in;  // (M, N)
  const int64_t M = x.size(0), N = x.size(1);
  LayerNormOut o{empty({M, N}, {.dtype = x.dtype()}), empty({M}, {.dtype = x.dtype()}),
                 empty({M}, {.dtype = x.dtype()}), res.defined() ? x : Tensor()};
  LOOM_DISPATCH_FLOATING(x.dtype(), "layer_norm", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
      parallel_for(0, M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N, 1)),
                   [&](int64_t lo, int64_t hi) {
                     layer_norm_rows(x.data<scalar_t>(), data_or_null<scalar_t>(w),
                                     data_or_null<scalar_t>(b), o.y.data<scalar_t>(),
                                     o.mean.data<scalar_t>(), o.rstd.data<scalar_t>(), N, eps, lo,
                                     hi);
                   });
    }
  });
  if (extras.y_dtype && *extras.y_dtype != x.dtype()) o.y = raw::cast(o.y, *extras.y_dtype);
  return o;
}

// dy: (M, N) contiguous, x's dtype or 16-bit; x, mean, rstd: the forward's -> dx, dw, db
LayerNormGrads CpuBackend::layer_norm_backward(const Tensor& dy_in, const Tensor& x,
                                               const Tensor& w, const Tensor& mean,
                                               const Tensor& rstd, bool need_weight, bool need_bias,
                                               const LayerNormBackwardExtras& extras) {
  check_layer_norm_input("layer_norm_backward", x);
  const Tensor dy = raw::cast(dy_in, x.dtype());  // the same tensor when it already is
  LOOM_CHECK(dy.shape() == x.shape() && dy.is_contiguous(), "layer_norm_backward: grad ",
             describe(dy), " should be contiguous like x ", describe(x));
  check_layer_norm_backward_extras("layer_norm_backward", extras, x);
  const Tensor& grad_add = extras.grad_add;
  const int64_t M = x.size(0), N = x.size(1);
  LayerNormGrads g;
  g.grad_input = empty({M, N}, {.dtype = x.dtype()});
  if (need_weight) g.grad_weight = empty({N}, {.dtype = x.dtype()});
  if (need_bias) g.grad_bias = empty({N}, {.dtype = x.dtype()});
  LOOM_DISPATCH_FLOATING(x.dtype(), "layer_norm_backward", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
      const scalar_t *pdy = dy.data<scalar_t>(), *px = x.data<scalar_t>();
      const scalar_t *pm = mean.data<scalar_t>(), *pr = rstd.data<scalar_t>();
      parallel_for(0, M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N, 1)),
                   [&](int64_t lo, int64_t hi) {
                     layer_norm_backward_rows(pdy, px, data_or_null<scalar_t>(w), pm, pr,
                                              data_or_null<scalar_t>(grad_add),
                                              g.grad_input.data<scalar_t>(), N, lo, hi);
                   });
      if (need_weight || need_bias)
        parallel_for(0, N, 1, [&](int64_t lo, int64_t hi) {
          layer_norm_param_grads(pdy, px, pm, pr,
                                 need_weight ? g.grad_weight.data<scalar_t>() : nullptr,
                                 need_bias ? g.grad_bias.data<scalar_t>() : nullptr, M, N, lo, hi);
        });
    }
  });
  if (extras.grad_input_low) g.grad_input_low = raw::cast(g.grad_input, *extras.grad_input_low);
  return g;
}

}  // namespace loom::cpu
