// The CPU's BatchNorm (batch statistics) + ReLU + MaxPool2d(2) (Backend::batch_norm_relu_max_pool2)
// on x (N, C, H, W) with even H and W: the composition the CUDA kernels fuse
// (kernels/cuda/norm/cuda_batch_norm_pool.cu, Note [Batch norm into max pool]), written to be read,
// not to be fast. The op layer fuses only on CUDA, so this is the reference the CUDA kernels are
// tested against, with the same arithmetic: each window's four values are computed from x and the
// saved statistics as the CUDA kernels compute them, so both backends pick the same argmax. Leaves
// out: speed (the CPU trains through batch_norm and max_pool2d), channels-last, odd H or W.
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

// A (C) vector as doubles (exact for every dtype); `absent` for an undefined one.
std::vector<double> per_channel(const Tensor& t, int64_t C, double absent) {
  if (!t.defined()) return std::vector<double>(size_t(C), absent);
  return raw::cast(raw::contiguous(t), DType::F64).to_vector<double>();
}

// Calls f(o, at, arg, best) for every output o of the pooled (N, C, H / 2, W / 2) tensor: at holds
// the window's four offsets into x (row-major), arg the winner's place in it and best its value,
// y = T(max(fma(x - mean, scale, shift), 0)) with mean the saved mean in the accumulate type,
// scale = w * invstd (the saved, rounded invstd) rounded once and shift = b: the CUDA kernels'
// bn_pre and rounding (Note [ReLU mask from x]). The first maximum wins, as in max_pool2d.
template <typename T, typename F>
void for_each_window(const Tensor& x, const std::vector<double>& mean,
                     const std::vector<double>& invstd, const std::vector<double>& w,
                     const std::vector<double>& b, const F& f) {
  using A = acc_t<T>;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), P = H / 2, Q = W / 2;
  const T* xp = x.data<T>();
  parallel_for(0, N * C, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t c = plane % C;
      const A m = A(mean[c]), a = A(w[c] * invstd[c]), s = A(b[c]);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t top = plane * H * W + 2 * p * W + 2 * q;
          const int64_t at[4] = {top, top + 1, top + W, top + W + 1};
          A best = -std::numeric_limits<A>::infinity();
          int arg = 0;
          for (int k = 0; k < 4; ++k) {
            const A pre = std::fma(A(xp[at[k]]) - m, a, s);
            const A y = A(T(pre > A(0) ? pre : A(0)));
            if (y > best) best = y, arg = k;
          }
          f((plane * P + p) * Q + q, at, arg, best);
        }
    }
  });
}

}  // namespace

BatchNormOut CpuBackend::batch_norm_relu_max_pool2(const Tensor& x0, const Tensor& weight,
                                                   const Tensor& bias, const Tensor& running_mean,
                                                   const Tensor& running_var, double momentum,
                                                   double eps) {
  check_batch_norm_pool2_input("batch_norm_relu_max_pool2", x0);
  Tensor x = raw::contiguous(x0);
  // The statistics and the running-stat update; its normalised output is not used.
  BatchNormOut bn = batch_norm(x, weight, bias, running_mean, running_var, true, momentum, eps);
  const int64_t C = x.size(1);
  std::vector<double> mean = per_channel(bn.save_mean, C, 0.0),
                      invstd = per_channel(bn.save_invstd, C, 1.0), w = per_channel(weight, C, 1.0),
                      b = per_channel(bias, C, 0.0);
  BatchNormOut out;
  out.y = empty({x.size(0), C, x.size(2) / 2, x.size(3) / 2}, {.dtype = x.dtype()});
  out.save_mean = bn.save_mean;
  out.save_invstd = bn.save_invstd;
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_relu_max_pool2", [&] {
    using T = scalar_t;
    T* yp = out.y.data<T>();
    for_each_window<T>(x, mean, invstd, w, b,
                       [&](int64_t o, const int64_t*, int, acc_t<T> best) { yp[o] = T(best); });
  });
  return out;
}

// The gradient batch norm's output receives is the pooled gradient at each window's argmax where
// the ReLU passed it (its value > 0), else 0; batch_norm_backward takes it from there.
BatchNormGrads CpuBackend::batch_norm_relu_max_pool2_backward(
    const Tensor& grad_y, const Tensor& x0, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd) {
  check_batch_norm_pool2_input("batch_norm_relu_max_pool2_backward", x0);
  Tensor x = raw::contiguous(x0), gout = raw::contiguous(raw::cast(grad_y, x0.dtype()));
  const int64_t C = x.size(1);
  LOOM_CHECK(gout.shape() == Shape({x.size(0), C, x.size(2) / 2, x.size(3) / 2}),
             "batch_norm_relu_max_pool2_backward: gradient ", gout.shape(),
             " does not match the pooled output of input ", x.shape());
  std::vector<double> mean = per_channel(save_mean, C, 0.0),
                      invstd = per_channel(save_invstd, C, 1.0), w = per_channel(weight, C, 1.0),
                      b = per_channel(bias, C, 0.0);
  Tensor dy = empty(x.shape(), {.dtype = x.dtype()});
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_relu_max_pool2_backward", [&] {
    using T = scalar_t;
    const T* gp = gout.data<T>();
    T* dp = dy.data<T>();
    for_each_window<T>(x, mean, invstd, w, b,
                       [&](int64_t o, const int64_t* at, int arg, acc_t<T> best) {
                         for (int k = 0; k < 4; ++k)
                           dp[at[k]] = k == arg && best > acc_t<T>(0) ? gp[o] : T(0);
                       });
  });
  return batch_norm_backward(dy, x, weight, bias, save_mean, save_invstd);
}

}  // namespace loom::cpu
