// CPU batch normalisation: the fused forward (batch statistics in training, running statistics in
// eval) with the in-place running-stat update, and the fused training-mode backward. x is read as
// (N, C, L) with L the product of the trailing dims; the work is parallel over channels.
// Sums run in the accumulation type over each contiguous (n, c) row of L values and add up in
// double across rows (Note [Batch norm sums]); per-channel vectors (weight, stats) are float64.
// Leaves out: the eval-mode backward (elementwise; the op layer writes it with ops) and layer_norm
// (a composite in autograd/ops/norm.cpp).
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

// Note [Batch norm formulas]
// Per channel c, over the M = N * L values x_i of that channel:
//   mean = sum x_i / M,  var = sum (x_i - mean)^2 / M (biased: used to normalise),
//   invstd = 1 / sqrt(var + eps),  xhat_i = (x_i - mean) invstd,  y_i = w xhat_i + b.
// Running stats (training): running_mean = (1 - momentum) running_mean + momentum mean and
//   running_var = (1 - momentum) running_var + momentum var * M / (M - 1) (unbiased).
// Backward, with dy the incoming gradient:
//   db = sum dy_i,  dw = sum dy_i xhat_i,
//   dx_i = w invstd (dy_i - db / M - xhat_i dw / M).
// Without weight (affine = false) w = 1 and dw, db are not returned.

// Note [Batch norm sums]
// A channel's sums run over M = N * L values, N rows of L contiguous values each (L = 784 for a
// 28 x 28 image). Each row is summed in the accumulation type A (float for float, half, bfloat16;
// double for double) with `omp simd`, which lets the compiler keep eight float partial sums in one
// AVX2 register, and the row sums add up in double. Summing every value in double instead (the
// first version) converts each float to double and does half as many additions per instruction:
// on the cnn workload's CPU step that made batch norm's backward 15% of the step, compute-bound
// far above what its memory traffic costs. A row's float sum has a rounding error of about
// L / 8 * 2^-24 of its absolute sum; across rows and channels the double sum adds none of note.
// float64 tensors sum in double all the way (the golden tests against PyTorch stay at 1e-10).
// The forward's statistics read x once: a row (3 KB at L = 784) stays in L1 while its mean and
// then its squared deviations from that mean are summed, and the rows' (count, mean, squared
// deviations) merge in double (Chan, Golub and LeVeque's pairwise update), where two passes over
// the whole channel (mean first, then deviations) read x from memory twice.

namespace {

struct NormGeom {
  int64_t N, C, L;
};

NormGeom norm_geom(const Tensor& x) {
  int64_t N = x.size(0), C = x.size(1);
  return {N, C, N * C == 0 ? 0 : x.numel() / (N * C)};
}

// A per-channel vector as float64 values, or `fill` repeated when t is undefined.
std::vector<double> channel_values(const Tensor& t, int64_t C, double fill) {
  if (!t.defined()) return std::vector<double>(size_t(C), fill);
  Tensor d = raw::contiguous(raw::cast(t, DType::F64));
  const double* p = d.data<double>();
  return std::vector<double>(p, p + C);
}

// Writes float64 values into t (any floating dtype, any layout) through the backend's copy.
void store_channel_values(const Tensor& t, const std::vector<double>& v) {
  Tensor src = from_vector(v, {int64_t(v.size())});
  cpu_backend().copy_(t, raw::view(src, t.shape()));
}

// Runs f(c) for every channel in parallel; each channel is about per_channel elements of work.
template <typename F>
void for_each_channel(int64_t C, int64_t per_channel, const F& f) {
  int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(per_channel, 1));
  parallel_for(0, C, grain, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) f(c);
  });
}

// x: (N, C, L) contiguous -> per-channel biased mean and var. One pass over memory: each row's
// mean and sum of squared deviations come from two passes over the row while it is in L1, and
// the rows merge in double by Chan et al.'s pairwise update (Note [Batch norm sums]).
template <typename T>
void channel_stats(const T* x, const NormGeom& g, std::vector<double>& mean,
                   std::vector<double>& var) {
  using A = acc_t<T>;
  const double L = double(g.L);
  for_each_channel(g.C, g.N * g.L, [&](int64_t c) {
    double n = 0, m = 0, m2 = 0;  // the rows so far: count, mean, sum of squared deviations
    for (int64_t r = 0; r < g.N; ++r) {
      const T* p = x + (r * g.C + c) * g.L;
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t l = 0; l < g.L; ++l) s += A(p[l]);
      const A row_mean = A(s / A(g.L));
      A q = 0;
#pragma omp simd reduction(+ : q)
      for (int64_t l = 0; l < g.L; ++l) {
        A d = A(p[l]) - row_mean;
        q += d * d;
      }
      const double delta = double(s) / L - m, total = n + L;
      m += delta * L / total;
      m2 += double(q) + delta * delta * n * L / total;
      n = total;
    }
    mean[c] = m;
    var[c] = m2 / n;
  });
}

// y = (x - mean[c]) * scale[c] + shift[c] (+ res, when given), then max(y, 0) with relu (a NaN
// becomes 0, as ReluOp); one rounding to T.
template <typename T>
void affine_per_channel(const T* x, const T* res, T* y, const NormGeom& g,
                        const std::vector<double>& mean, const std::vector<double>& scale,
                        const std::vector<double>& shift, bool relu) {
  using A = acc_t<T>;
  for_each_channel(g.C, g.N * g.L, [&](int64_t c) {
    A m = A(mean[c]), a = A(scale[c]), b = A(shift[c]);
    for (int64_t n = 0; n < g.N; ++n) {
      const T* xp = x + (n * g.C + c) * g.L;
      const T* rp = res ? res + (n * g.C + c) * g.L : nullptr;
      T* yp = y + (n * g.C + c) * g.L;
      if (relu || rp) {
        for (int64_t l = 0; l < g.L; ++l) {
          A v = (A(xp[l]) - m) * a + b;
          if (rp) v += A(rp[l]);
          yp[l] = T(!relu || v > A(0) ? v : A(0));
        }
      } else {
        for (int64_t l = 0; l < g.L; ++l) yp[l] = T((A(xp[l]) - m) * a + b);
      }
    }
  });
}

// gy, x: (N, C, L) contiguous -> gx, and the per-channel sums db, dw (Note [Batch norm formulas]).
// relu_y (null: none): the forward's output with the fused ReLU; dy counts only where it is > 0.
template <typename T>
void batch_norm_backward_kernel(const T* gy, const T* x, const T* relu_y, T* gx, const NormGeom& g,
                                const std::vector<double>& w, const std::vector<double>& mean,
                                const std::vector<double>& invstd, std::vector<double>& db,
                                std::vector<double>& dw) {
  using A = acc_t<T>;
  const double M = double(g.N * g.L);
  for_each_channel(g.C, 2 * g.N * g.L, [&](int64_t c) {
    const double m = mean[c], is = invstd[c];
    const A mc = A(m);
    // sum dy and sum dy (x - mean), each row summed in A (Note [Batch norm sums])
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < g.N; ++n) {
      const T* yp = gy + (n * g.C + c) * g.L;
      const T* xp = x + (n * g.C + c) * g.L;
      const T* rp = relu_y ? relu_y + (n * g.C + c) * g.L : nullptr;
      A row_dy = 0, row_dyx = 0;
      if (rp) {
#pragma omp simd reduction(+ : row_dy, row_dyx)
        for (int64_t l = 0; l < g.L; ++l) {
          A d = A(rp[l]) > A(0) ? A(yp[l]) : A(0);
          row_dy += d;
          row_dyx += d * (A(xp[l]) - mc);
        }
      } else {
#pragma omp simd reduction(+ : row_dy, row_dyx)
        for (int64_t l = 0; l < g.L; ++l) {
          A d = A(yp[l]);
          row_dy += d;
          row_dyx += d * (A(xp[l]) - mc);
        }
      }
      sdy += double(row_dy);
      sdyx += double(row_dyx);
    }
    db[c] = sdy;
    dw[c] = sdyx * is;
    // dx = k (dy - sdy / M - (x - mean) invstd^2 sdyx / M), k = w invstd
    const A k = A(w[c] * is), off = A(sdy / M), slope = A(is * is * sdyx / M);
    for (int64_t n = 0; n < g.N; ++n) {
      const T* yp = gy + (n * g.C + c) * g.L;
      const T* xp = x + (n * g.C + c) * g.L;
      const T* rp = relu_y ? relu_y + (n * g.C + c) * g.L : nullptr;
      T* op = gx + (n * g.C + c) * g.L;
      if (rp) {
        for (int64_t l = 0; l < g.L; ++l) {
          A d = A(rp[l]) > A(0) ? A(yp[l]) : A(0);
          op[l] = T(k * (d - off - (A(xp[l]) - mc) * slope));
        }
      } else {
        for (int64_t l = 0; l < g.L; ++l) op[l] = T(k * (A(yp[l]) - off - (A(xp[l]) - mc) * slope));
      }
    }
  });
}

DType stats_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// x: (N, C, L) contiguous -> y = (x - mean) * (w * invstd) + b per channel, + residual when
// defined (x's shape and dtype), then max(y, 0) with relu.
Tensor normalise(const Tensor& x, const std::vector<double>& w, const std::vector<double>& b,
                 const std::vector<double>& mean, const std::vector<double>& invstd, bool relu,
                 const Tensor& residual = Tensor()) {
  NormGeom g = norm_geom(x);
  std::vector<double> scale(size_t(g.C));
  for (int64_t c = 0; c < g.C; ++c) scale[c] = w[c] * invstd[c];
  Tensor y = empty(x.shape(), {.dtype = x.dtype()});
  const Tensor r = residual.defined() ? raw::contiguous(residual) : Tensor();
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    affine_per_channel(x.data<scalar_t>(), data_or_null<scalar_t>(r), y.data<scalar_t>(), g, mean,
                       scale, b, relu);
  });
  return y;
}

}  // namespace

BatchNormOut CpuBackend::batch_norm(const Tensor& x0, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    bool training, double momentum, double eps, bool relu,
                                    const Tensor& residual) {
  Tensor x = raw::contiguous(x0);
  NormGeom g = norm_geom(x);
  check_batch_norm_residual("batch_norm", x, residual);
  const bool batch_stats = training || !running_mean.defined();
  std::vector<double> mean(size_t(g.C)), var(size_t(g.C));
  if (batch_stats) {
    LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm",
                           [&] { channel_stats(x.data<scalar_t>(), g, mean, var); });
  } else {
    mean = channel_values(running_mean, g.C, 0.0);
    var = channel_values(running_var, g.C, 1.0);
  }
  std::vector<double> invstd(size_t(g.C));
  for (int64_t c = 0; c < g.C; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + eps);
  const std::vector<double> w = channel_values(weight, g.C, 1.0),
                            b = channel_values(bias, g.C, 0.0);
  BatchNormOut out;
  if (!batch_stats) {
    out.y = normalise(x, w, b, mean, invstd, relu, residual);
    return out;
  }
  // Normalised with the statistics as saved (float32 for a float32 input), so that
  // batch_norm_apply makes this y again bit for bit (Note [Recomputed activations]).
  out.save_mean = raw::cast(from_vector(mean, {g.C}), stats_dtype(x.dtype()));
  out.save_invstd = raw::cast(from_vector(invstd, {g.C}), stats_dtype(x.dtype()));
  out.y = normalise(x, w, b, channel_values(out.save_mean, g.C, 0.0),
                    channel_values(out.save_invstd, g.C, 1.0), relu, residual);
  if (training && running_mean.defined()) {
    const double M = double(g.N * g.L);
    std::vector<double> rm = channel_values(running_mean, g.C, 0.0);
    std::vector<double> rv = channel_values(running_var, g.C, 1.0);
    for (int64_t c = 0; c < g.C; ++c) {
      rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
      rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * M / (M - 1);
    }
    store_channel_values(running_mean, rm);
    if (running_var.defined()) store_channel_values(running_var, rv);
  }
  return out;
}

Tensor CpuBackend::batch_norm_apply(const Tensor& x0, const Tensor& weight, const Tensor& bias,
                                    const Tensor& save_mean, const Tensor& save_invstd, bool relu) {
  Tensor x = raw::contiguous(x0);
  NormGeom g = norm_geom(x);
  return normalise(x, channel_values(weight, g.C, 1.0), channel_values(bias, g.C, 0.0),
                   channel_values(save_mean, g.C, 0.0), channel_values(save_invstd, g.C, 1.0),
                   relu);
}

// bias is not read: the CPU masks by the saved output relu_out.
BatchNormGrads CpuBackend::batch_norm_backward(const Tensor& grad_y, const Tensor& x0,
                                               const Tensor& weight, const Tensor& /*bias*/,
                                               const Tensor& save_mean, const Tensor& save_invstd,
                                               const Tensor& relu_out) {
  Tensor x = raw::contiguous(x0), gy = raw::contiguous(raw::cast(grad_y, x0.dtype()));
  Tensor ry = relu_out.defined() ? raw::contiguous(raw::cast(relu_out, x0.dtype())) : Tensor();
  NormGeom g = norm_geom(x);
  std::vector<double> w = channel_values(weight, g.C, 1.0);
  std::vector<double> mean = channel_values(save_mean, g.C, 0.0);
  std::vector<double> invstd = channel_values(save_invstd, g.C, 1.0);
  std::vector<double> db(size_t(g.C)), dw(size_t(g.C));
  BatchNormGrads out;
  out.grad_input = empty(x.shape(), {.dtype = x.dtype()});
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
    batch_norm_backward_kernel(gy.data<scalar_t>(), x.data<scalar_t>(), data_or_null<scalar_t>(ry),
                               out.grad_input.data<scalar_t>(), g, w, mean, invstd, db, dw);
  });
  if (weight.defined()) {
    out.grad_weight = raw::cast(from_vector(dw, {g.C}), weight.dtype());
    out.grad_bias = raw::cast(from_vector(db, {g.C}), weight.dtype());
  }
  return out;
}

}  // namespace loom::cpu
