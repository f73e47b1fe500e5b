// CUDA pooling and batch norm kernels against naive float64 references: max pooling (values,
// indices, -inf padding, NaN) and average pooling (count_include_pad on and off) forward and
// backward; batch norm training (statistics, save_mean/save_invstd, running-stat update with the
// unbiased variance), eval, and backward, the fused ReLU's mask recomputed from x in backward, and
// the split Welford statistics against the naive two-pass kernel; batch norm + ReLU + max pooling
// as one op against the composition and the CPU. Skipped without a GPU; compiles to nothing
// without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm/cuda_batch_norm.h"
#include "nn/fuse.h"
#include "nn/layers.h"
#include "support/cuda_test_util.h"
#include "support/nn_kernels_support.h"

using namespace loom;
using namespace loom::testing;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

cuda::CudaBackend& be() { return cuda::cuda_backend(); }

double tol_of(DType dt) {
  switch (dt) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 1e-6;
    case DType::F16:
      return 1e-3;
    default:
      return 8e-3;
  }
}

Pool2dParams pool(std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> pad,
                  bool include_pad = true) {
  Pool2dParams p;
  p.kernel = k, p.stride = s, p.padding = pad, p.count_include_pad = include_pad;
  return p;
}

std::vector<PoolShape> pool_shapes() {
  return {{2, 3, 8, 8, pool({2, 2}, {2, 2}, {0, 0})},  // the cnn workload's pooling
          {2, 3, 9, 7, pool({2, 2}, {2, 2}, {0, 0})},  // the same, odd sizes: cells past windows
          {2, 3, 9, 7, pool({3, 3}, {2, 2}, {1, 1})},  // overlapping windows with padding
          {1, 2, 10, 11, pool({3, 2}, {1, 2}, {1, 0}, false)},
          {3, 2, 5, 6, pool({2, 3}, {3, 2}, {1, 1}, false)}};
}

TEST(CudaPool, MaxPoolForwardAndBackward) {
  SKIP_WITHOUT_CUDA();
  for (const PoolShape& g : pool_shapes())
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      Tensor x = random_tensor({g.N, g.C, g.H, g.W}, dt, 1, gpu());
      std::vector<double> y_ref;
      std::vector<int64_t> idx_ref;
      max_pool_ref(g, host(x), y_ref, idx_ref);
      auto [y, idx] = be().max_pool2d(x, g.p);
      ASSERT_EQ(y.shape(), (Shape{g.N, g.C, g.P(), g.Q()}));
      ASSERT_EQ(idx.dtype(), kI64);
      EXPECT_EQ(host(y), y_ref) << dtype_name(dt);  // a max is exact
      EXPECT_EQ(idx.to_vector<int64_t>(), idx_ref) << dtype_name(dt);
      // backward: scatter the output gradient to the argmax of each window
      Tensor gy = random_tensor(y.shape(), dt, 2, gpu());
      std::vector<double> gyv = host(gy), gx_ref(size_t(x.numel()), 0.0);
      for (size_t o = 0; o < gyv.size(); ++o) {
        int64_t plane = int64_t(o) / (g.P() * g.Q());
        gx_ref[size_t(plane * g.H * g.W + idx_ref[o])] += gyv[o];
      }
      Tensor gx = be().max_pool2d_backward(gy, idx, x.shape(), g.p);
      EXPECT_LT(rel_err(gx, gx_ref), tol_of(dt)) << dtype_name(dt) << " backward (gather)";
      cuda::set_use_naive_kernels(true);  // the scatter kept beside the gather
      Tensor gx_naive = be().max_pool2d_backward(gy, idx, x.shape(), g.p);
      cuda::set_use_naive_kernels(false);
      EXPECT_LT(rel_err(gx_naive, gx_ref), tol_of(dt)) << dtype_name(dt) << " backward (scatter)";
    }
}

TEST(CudaPool, MaxPoolPaddingIsMinusInfinityAndNaNWins) {
  SKIP_WITHOUT_CUDA();
  // All values negative: padding must not win (it is -inf, not 0).
  PoolShape g{1, 1, 4, 4, pool({3, 3}, {2, 2}, {1, 1})};
  Tensor x = random_tensor({1, 1, 4, 4}, kF32, 3, kCPU, 0.1, -5.0);
  std::vector<double> xv = host(x);
  xv[5] = std::nan("");  // (1, 1): inside the first window
  Tensor xg = from_vector(xv, {1, 1, 4, 4}).to(kF32).to(gpu());
  std::vector<double> y_ref;
  std::vector<int64_t> idx_ref;
  max_pool_ref(g, host(xg), y_ref, idx_ref);
  auto [y, idx] = be().max_pool2d(xg, g.p);
  std::vector<double> yv = host(y);
  ASSERT_EQ(yv.size(), y_ref.size());
  for (size_t i = 0; i < yv.size(); ++i) {
    if (std::isnan(y_ref[i])) {
      EXPECT_TRUE(std::isnan(yv[i])) << "output " << i;
    } else {
      EXPECT_EQ(yv[i], y_ref[i]) << "output " << i;
    }
    if (!std::isnan(yv[i])) {
      EXPECT_LT(yv[i], 0.0) << "padding won at output " << i;
    }
  }
  EXPECT_EQ(idx.to_vector<int64_t>(), idx_ref);
}

// Note [Max pool 2 x 2 forward]: MaxPool2d(2) on NCHW with an even W has its own forward. On
// data full of ties, NaNs and -inf it gives the general kernel's values and indices exactly (the
// first maximum of the window in row order, a NaN at once), in every dtype; an input that is not
// aligned to a pair (a view one element into its storage) takes the general kernel and agrees too.
TEST(CudaPool, MaxPoolTwoByTwoMatchesTheGeneralKernelWithTiesAndNaN) {
  SKIP_WITHOUT_CUDA();
  PoolShape g{2, 3, 6, 8, pool({2, 2}, {2, 2}, {0, 0})};
  const int64_t n = g.N * g.C * g.H * g.W;
  std::vector<double> xv(size_t(n + 1));
  for (int64_t i = 0; i <= n; ++i) xv[size_t(i)] = double(int64_t(i * 7919 % 5) - 2);  // ties
  for (int64_t i = 3; i <= n; i += 17) xv[size_t(i)] = std::nan("");
  for (int64_t i = 5; i <= n; i += 13) xv[size_t(i)] = -INFINITY;
  const Shape shape{g.N, g.C, g.H, g.W};
  for (DType dt : {kF32, kF64, kF16, kBF16}) {
    Tensor storage = from_vector(xv, {n + 1}).to(dt).to(gpu());
    for (int64_t offset : {0, 1}) {
      const std::string what = std::string(dtype_name(dt)) + (offset ? ", unaligned view" : "");
      Tensor x = storage.slice(0, offset, offset + n).view(shape);
      std::vector<double> y_ref;
      std::vector<int64_t> idx_ref;
      max_pool_ref(g, host(x), y_ref, idx_ref);
      auto [y, idx] = be().max_pool2d(x, g.p);
      cuda::set_use_naive_kernels(true);  // the general kernel
      auto [y_gen, idx_gen] = be().max_pool2d(x, g.p);
      cuda::set_use_naive_kernels(false);
      EXPECT_EQ(idx.to_vector<int64_t>(), idx_ref) << what;
      EXPECT_EQ(idx_gen.to_vector<int64_t>(), idx_ref) << what << " (general kernel)";
      std::vector<double> yv = host(y), yg = host(y_gen);
      for (size_t i = 0; i < y_ref.size(); ++i) {
        if (std::isnan(y_ref[i])) {
          EXPECT_TRUE(std::isnan(yv[i]) && std::isnan(yg[i])) << what << " output " << i;
        } else {
          EXPECT_EQ(yv[i], y_ref[i]) << what << " output " << i;
          EXPECT_EQ(yg[i], y_ref[i]) << what << " output " << i << " (general kernel)";
        }
      }
    }
  }
}

TEST(CudaPool, AvgPoolForwardAndBackward) {
  SKIP_WITHOUT_CUDA();
  for (const PoolShape& g : pool_shapes())
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      Tensor x = random_tensor({g.N, g.C, g.H, g.W}, dt, 4, gpu());
      std::vector<double> xv = host(x), y_ref(size_t(g.N * g.C * g.P() * g.Q()), 0.0);
      for_each_avg_tap(
          g, [&](int64_t o, int64_t i, double div) { y_ref[size_t(o)] += xv[size_t(i)] / div; });
      Tensor y = be().avg_pool2d(x, g.p);
      ASSERT_EQ(y.shape(), (Shape{g.N, g.C, g.P(), g.Q()}));
      EXPECT_LT(rel_err(y, y_ref), tol_of(dt))
          << dtype_name(dt) << " include_pad " << g.p.count_include_pad;
      Tensor gy = random_tensor(y.shape(), dt, 5, gpu());
      std::vector<double> gyv = host(gy), gx_ref(size_t(x.numel()), 0.0);
      for_each_avg_tap(
          g, [&](int64_t o, int64_t i, double div) { gx_ref[size_t(i)] += gyv[size_t(o)] / div; });
      Tensor gx = be().avg_pool2d_backward(gy, x.shape(), g.p);
      EXPECT_LT(rel_err(gx, gx_ref), tol_of(dt))
          << dtype_name(dt) << " backward include_pad " << g.p.count_include_pad;
    }
}

// ---------------------------------------------------------------- batch norm
struct BnRef {
  std::vector<double> mean, var, y;
};

// Per-channel biased statistics of x (N, C, L) and y = (x - mean) / sqrt(var + eps) * w + b.
BnRef bn_ref(const std::vector<double>& x, int64_t N, int64_t C, int64_t L,
             const std::vector<double>& w, const std::vector<double>& b, double eps,
             const std::vector<double>* use_mean = nullptr,
             const std::vector<double>* use_var = nullptr) {
  BnRef r;
  r.mean.assign(size_t(C), 0.0), r.var.assign(size_t(C), 0.0), r.y.assign(x.size(), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) s += x[size_t((n * C + c) * L + l)];
    double m = s / double(N * L);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) ss += std::pow(x[size_t((n * C + c) * L + l)] - m, 2);
    r.mean[c] = m, r.var[c] = ss / double(N * L);
    double mu = use_mean ? (*use_mean)[c] : m, var = use_var ? (*use_var)[c] : r.var[c];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) {
        size_t i = size_t((n * C + c) * L + l);
        r.y[i] = (x[i] - mu) / std::sqrt(var + eps) * w[c] + b[c];
      }
  }
  return r;
}

struct BnCase {
  Shape shape;
  DType dtype;
  double shift;  // added to x: a large mean tests the statistics' numerics
};

TEST(CudaBatchNorm, TrainingEvalAndBackward) {
  SKIP_WITHOUT_CUDA();
  const double eps = 1e-5, momentum = 0.1;
  for (BnCase bc : {BnCase{{8, 5, 7, 6}, kF32, 0.0}, BnCase{{64, 3, 32, 32}, kF32, 100.0},
                    BnCase{{16, 12}, kF32, 3.0}, BnCase{{4, 6, 9}, kF64, 1.0},
                    BnCase{{8, 4, 6, 6}, kBF16, 0.5}, BnCase{{8, 4, 6, 6}, kF16, 0.5}}) {
    const DType dt = bc.dtype;
    const int64_t N = bc.shape[0], C = bc.shape[1], L = numel(bc.shape) / (N * C);
    std::string what = std::string(dtype_name(dt)) + " " + str(bc.shape);
    Tensor x = random_tensor(bc.shape, dt, 7, gpu(), 2.0, bc.shift);
    Tensor w = random_tensor({C}, dt, 8, gpu(), 0.5, 1.0), b = random_tensor({C}, dt, 9, gpu());
    DType stat_dt = dt == kF64 ? kF64 : kF32;
    Tensor rm = random_tensor({C}, stat_dt, 10, gpu()),
           rv = random_tensor({C}, stat_dt, 11, gpu(), 0.1, 1.0);
    std::vector<double> xv = host(x), wv = host(w), bv = host(b), rm0 = host(rm), rv0 = host(rv);
    BnRef ref = bn_ref(xv, N, C, L, wv, bv, eps);
    double tol = dt == kF64 ? 1e-10 : dt == kF32 ? 2e-5 : dt == kF16 ? 2e-3 : 1e-2;

    BatchNormOut out = be().batch_norm(x, w, b, rm, rv, /*training=*/true, momentum, eps);
    EXPECT_LT(rel_err(out.y, ref.y), tol) << what << " y";
    ASSERT_EQ(out.save_mean.dtype(), stat_dt);
    EXPECT_LT(rel_err(out.save_mean, ref.mean), 1e-6) << what << " save_mean";
    std::vector<double> invstd(static_cast<size_t>(C)), rm_want(invstd), rv_want(invstd);
    const double M = double(N * L);
    for (int64_t c = 0; c < C; ++c) {
      invstd[c] = 1 / std::sqrt(ref.var[c] + eps);
      rm_want[c] = (1 - momentum) * rm0[c] + momentum * ref.mean[c];
      rv_want[c] = (1 - momentum) * rv0[c] + momentum * ref.var[c] * M / (M - 1);
    }
    EXPECT_LT(rel_err(out.save_invstd, invstd), 1e-5) << what << " save_invstd";
    EXPECT_LT(rel_err(rm, rm_want), 1e-6) << what << " running_mean";
    EXPECT_LT(rel_err(rv, rv_want), 1e-5) << what << " running_var (unbiased)";

    // eval: the running statistics normalise, nothing is updated or saved
    std::vector<double> rm1 = host(rm), rv1 = host(rv);
    BatchNormOut ev = be().batch_norm(x, w, b, rm, rv, /*training=*/false, momentum, eps);
    EXPECT_FALSE(ev.save_mean.defined());
    EXPECT_LT(rel_err(ev.y, bn_ref(xv, N, C, L, wv, bv, eps, &rm1, &rv1).y), tol)
        << what << " eval";
    EXPECT_EQ(host(rm), rm1) << what << " eval must not update running_mean";

    // backward (training): dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)), dw, db
    Tensor gy = random_tensor(bc.shape, dt, 12, gpu());
    std::vector<double> gyv = host(gy), gx_want(xv.size()), gw_want(size_t(C), 0.0),
                        gb_want(size_t(C), 0.0);
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < L; ++l) {
          size_t i = size_t((n * C + c) * L + l);
          gb_want[c] += gyv[i];
          gw_want[c] += gyv[i] * (xv[i] - ref.mean[c]) * invstd[c];
        }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < L; ++l) {
          size_t i = size_t((n * C + c) * L + l);
          double xhat = (xv[i] - ref.mean[c]) * invstd[c];
          gx_want[i] = wv[c] * invstd[c] * (gyv[i] - gb_want[c] / M - xhat * gw_want[c] / M);
        }
    }
    BatchNormGrads gr = be().batch_norm_backward(gy, x, w, b, out.save_mean, out.save_invstd);
    EXPECT_LT(rel_err(gr.grad_input, gx_want), 2 * tol) << what << " grad_input";
    EXPECT_LT(rel_err(gr.grad_weight, gw_want), tol) << what << " grad_weight";
    EXPECT_LT(rel_err(gr.grad_bias, gb_want), tol) << what << " grad_bias";
    BatchNormGrads gr_noaffine =
        be().batch_norm_backward(gy, x, Tensor(), Tensor(), out.save_mean, out.save_invstd);
    EXPECT_FALSE(gr_noaffine.grad_weight.defined());
  }
}

// Under autocast the float32 weight and bias go to the kernels with a bfloat16/float16 input
// (no casts around the layer); the result and the float32 parameter gradients match the CPU
// backend given the same mixed dtypes, with the fused ReLU on.
TEST(CudaBatchNorm, HalfInputWithFloat32WeightsMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {kBF16, kF16}) {
    const std::string what = dtype_name(dt);
    Tensor x = random_tensor({8, 6, 5, 4}, dt, 21, gpu(), 2.0, 0.5);
    Tensor w = random_tensor({6}, kF32, 22, gpu(), 0.5, 1.0),
           b = random_tensor({6}, kF32, 23, gpu());
    Tensor rm = zeros({6}, {.dtype = kF32, .device = gpu()}),
           rv = ones({6}, {.dtype = kF32, .device = gpu()});
    Tensor rm_cpu = rm.to(kCPU), rv_cpu = rv.to(kCPU);
    BatchNormOut out = be().batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, /*relu=*/true);
    Backend& cpu = backend_for(kCPU);
    BatchNormOut ref = cpu.batch_norm(x.to(kCPU), w.to(kCPU), b.to(kCPU), rm_cpu, rv_cpu, true, 0.1,
                                      1e-5, /*relu=*/true);
    ASSERT_EQ(out.y.dtype(), dt) << what;
    const double tol = dt == kF16 ? 2e-3 : 1e-2;
    EXPECT_LT(rel_err(out.y, host(ref.y)), tol) << what << " y";
    EXPECT_LT(rel_err(rm, host(rm_cpu)), 1e-5) << what << " running_mean";
    EXPECT_LT(rel_err(rv, host(rv_cpu)), 1e-5) << what << " running_var";

    Tensor gy = random_tensor(x.shape(), dt, 24, gpu());
    BatchNormGrads gr =
        be().batch_norm_backward(gy, x, w, b, out.save_mean, out.save_invstd, out.y);
    BatchNormGrads gr_ref = cpu.batch_norm_backward(gy.to(kCPU), x.to(kCPU), w.to(kCPU), b.to(kCPU),
                                                    ref.save_mean, ref.save_invstd, ref.y);
    ASSERT_EQ(gr.grad_weight.dtype(), kF32) << what;
    ASSERT_EQ(gr.grad_bias.dtype(), kF32) << what;
    EXPECT_LT(rel_err(gr.grad_input, host(gr_ref.grad_input)), 2 * tol) << what << " grad_input";
    EXPECT_LT(rel_err(gr.grad_weight, host(gr_ref.grad_weight)), tol) << what << " grad_weight";
    EXPECT_LT(rel_err(gr.grad_bias, host(gr_ref.grad_bias)), tol) << what << " grad_bias";
  }
  // Any other mix is refused by name.
  Tensor x = random_tensor({4, 3, 2, 2}, kF32, 25, gpu());
  Tensor w64 = random_tensor({3}, kF64, 26, gpu());
  try {
    be().batch_norm(x, w64, Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    ADD_FAILURE() << "a float64 weight with a float32 input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm: weight"), std::string::npos) << e.what();
  }
}

TEST(CudaBatchNorm, SplitWelfordMatchesNaiveTwoPass) {
  SKIP_WITHOUT_CUDA();
  // A large mean relative to the spread: sum-of-squares formulas would lose all digits here.
  for (Shape s :
       {Shape{256, 32, 28, 28}, Shape{256, 128, 7, 7}, Shape{3, 2, 5, 5}, Shape{1000, 7}}) {
    Tensor x = random_tensor(s, kF32, 13, gpu(), 0.01, 1000.0);
    auto [mean, var] = cuda::batch_norm_stats(x, /*naive=*/false);
    auto [mean_n, var_n] = cuda::batch_norm_stats(x, /*naive=*/true);
    int64_t N = s[0], C = s[1], L = numel(s) / (N * C);
    std::vector<double> xv = host(x), one(size_t(C), 1.0), zero(size_t(C), 0.0);
    BnRef ref = bn_ref(xv, N, C, L, one, zero, 1e-5);
    EXPECT_LT(rel_err(mean, ref.mean), 1e-6) << str(s);
    EXPECT_LT(rel_err(mean_n, ref.mean), 1e-7) << str(s);
    EXPECT_LT(rel_err(var, ref.var), 1e-3) << str(s) << " split Welford";
    EXPECT_LT(rel_err(var_n, ref.var), 1e-3) << str(s) << " naive two-pass";
  }
}

}  // namespace

// Note [ReLU mask from x]: on NCHW the backward recomputes the fused ReLU's mask from x instead of
// reading the forward's output. Its gradients must equal, bit for bit, those of the backward
// without ReLU given grad_y already masked by the output (y > 0): the same sums in the same order,
// so any element masked differently shows. Channels hit the edges: a constant channel with zero
// bias (pre-activation exactly 0: masked), one with a tiny positive bias (for float16 it rounds
// to an output of 0, which must be masked although the pre-activation is positive), a negative
// weight, and random data.
TEST(CudaBatchNorm, ReluMaskFromXMatchesTheOutputBitForBit) {
  SKIP_WITHOUT_CUDA();
  const int64_t N = 4, C = 5, L = 30;
  for (DType dt : {kF32, kF64, kBF16, kF16}) {
    const std::string what = dtype_name(dt);
    const DType pdt = dt == kF64 ? kF64 : kF32;  // autocast keeps float32 parameters
    std::vector<double> xv = host(random_tensor({N, C, 6, 5}, kF64, 41));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) {
        xv[size_t((n * C + 0) * L + l)] = 0.75;  // channel 0: constant, bias 0
        xv[size_t((n * C + 1) * L + l)] = -2.5;  // channel 1: constant, tiny bias
      }
    Tensor x = from_vector(xv, {N, C, 6, 5}).to(dt).to(gpu());
    Tensor w = from_vector(std::vector<double>{1.0, 1.0, -0.7, 1.3, 0.4}, {C}).to(pdt).to(gpu());
    Tensor b = from_vector(std::vector<double>{0.0, 1e-9, 0.2, -0.1, 0.0}, {C}).to(pdt).to(gpu());
    BatchNormOut out = be().batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, 1e-5, true);
    std::vector<double> yv = host(out.y);
    const double y_c1 = yv[size_t(1 * L)];
    EXPECT_EQ(yv[0], 0.0) << what << ": a pre-activation of exactly 0";
    if (dt == kF16) {
      EXPECT_EQ(y_c1, 0.0) << what << ": 1e-9 rounds to 0 in float16";
    } else {
      EXPECT_GT(y_c1, 0.0) << what << ": 1e-9 stays positive";
    }

    Tensor gy = random_tensor(x.shape(), dt, 42, gpu());
    std::vector<double> gv = host(gy);
    for (size_t i = 0; i < gv.size(); ++i) gv[i] = yv[i] > 0 ? gv[i] : 0.0;
    Tensor gy_masked = from_vector(gv, x.shape()).to(dt).to(gpu());  // exact: values of dt
    BatchNormGrads fused =
        be().batch_norm_backward(gy, x, w, b, out.save_mean, out.save_invstd, out.y);
    BatchNormGrads plain =
        be().batch_norm_backward(gy_masked, x, w, b, out.save_mean, out.save_invstd);
    EXPECT_TRUE(all_equal(plain.grad_input, fused.grad_input)) << what << " grad_input";
    EXPECT_TRUE(all_equal(plain.grad_weight, fused.grad_weight)) << what << " grad_weight";
    EXPECT_TRUE(all_equal(plain.grad_bias, fused.grad_bias)) << what << " grad_bias";
  }
}

// BatchNorm + ReLU + MaxPool2d(2) as one op (Note [Batch norm into max pool]) against the CUDA
// composition it replaces (batch_norm with relu, max_pool2d and their backwards: the same
// statistics kernels, so the output and running stats are bit for bit the same) and the CPU
// backend's reference, in every dtype, with x aligned to pairs and not (the scalar loads).
TEST(CudaBatchNormPool, FusedMatchesTheCompositionAndTheCpu) {
  SKIP_WITHOUT_CUDA();
  const int64_t N = 3, C = 5, H = 6, W = 8, n = N * C * H * W;
  for (DType dt : {kF32, kF64, kBF16, kF16})
    for (bool aligned : {true, false}) {
      const std::string what = std::string(dtype_name(dt)) + (aligned ? " aligned" : " unaligned");
      const DType pdt = dt == kF64 ? kF64 : kF32;  // float32 parameters for the half types
      Tensor x = random_tensor({N, C, H, W}, dt, 51, gpu(), 1.5, 0.2);
      if (!aligned)
        x = random_tensor({n + 1}, dt, 51, gpu(), 1.5, 0.2).slice(0, 1, n + 1).view({N, C, H, W});
      Tensor w = random_tensor({C}, pdt, 52, gpu(), 0.5, 1.0),
             b = random_tensor({C}, pdt, 53, gpu());
      Tensor rm1 = random_tensor({C}, pdt, 54, gpu()),
             rv1 = random_tensor({C}, pdt, 55, gpu(), 0.1, 1.0);
      Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
      BatchNormOut f = be().batch_norm_relu_max_pool2(x, w, b, rm1, rv1, 0.1, 1e-5);
      BatchNormOut c = be().batch_norm(x, w, b, rm2, rv2, true, 0.1, 1e-5, true);
      auto [pooled, idx] = be().max_pool2d(c.y, Pool2dParams{});
      ASSERT_EQ(f.y.shape(), (Shape{N, C, H / 2, W / 2})) << what;
      EXPECT_TRUE(all_equal(pooled, f.y)) << what << " output";
      EXPECT_TRUE(all_equal(rm2, rm1)) << what << " running_mean";
      EXPECT_TRUE(all_equal(rv2, rv1)) << what << " running_var";

      Tensor g = random_tensor(f.y.shape(), dt, 56, gpu());
      BatchNormGrads fg =
          be().batch_norm_relu_max_pool2_backward(g, x, w, b, f.save_mean, f.save_invstd);
      Tensor gy = be().max_pool2d_backward(g, idx, x.shape(), Pool2dParams{});
      BatchNormGrads cg = be().batch_norm_backward(gy, x, w, b, c.save_mean, c.save_invstd, c.y);
      const double tol = dt == kF64 ? 1e-12 : dt == kF32 ? 1e-5 : dt == kF16 ? 2e-3 : 1e-2;
      EXPECT_LT(rel_err(fg.grad_input, host(cg.grad_input)), tol) << what << " grad_input";
      EXPECT_LT(rel_err(fg.grad_weight, host(cg.grad_weight)), tol) << what << " grad_weight";
      EXPECT_LT(rel_err(fg.grad_bias, host(cg.grad_bias)), tol) << what << " grad_bias";

      // The CPU reference, from the same inputs (its statistics are summed in another order).
      Backend& cpu = backend_for(Device{});
      Tensor xc = x.to(kCPU), wc = w.to(kCPU), bc = b.to(kCPU), gc = g.to(kCPU);
      BatchNormOut r = cpu.batch_norm_relu_max_pool2(xc, wc, bc, Tensor(), Tensor(), 0.1, 1e-5);
      BatchNormGrads rg =
          cpu.batch_norm_relu_max_pool2_backward(gc, xc, wc, bc, r.save_mean, r.save_invstd);
      const double ctol = dt == kF64 ? 1e-10 : 4 * tol;
      EXPECT_LT(rel_err(f.y, host(r.y)), ctol) << what << " output against the CPU";
      EXPECT_LT(rel_err(fg.grad_input, host(rg.grad_input)), ctol) << what << " grad_input (CPU)";
      EXPECT_LT(rel_err(fg.grad_weight, host(rg.grad_weight)), ctol)
          << what << " grad_weight (CPU)";
      EXPECT_LT(rel_err(fg.grad_bias, host(rg.grad_bias)), ctol) << what << " grad_bias (CPU)";
    }
}

// After nn::fuse, a Sequential's BatchNorm2d, ReLU and MaxPool2d(2) run as the fused op on CUDA
// (in training; the composition in eval) and give the CPU's composed values and gradients; a
// MaxPool2d(3) is not fused.
TEST(CudaBatchNormPool, SequentialFusesOnCudaAndMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  auto run = [](Device dev, int64_t pool, bool train) {
    auto seq = nn::make<nn::Sequential>(nn::make<nn::BatchNorm2d>(4), nn::make<nn::ReLU>(),
                                        nn::make<nn::MaxPool2d>(pool));
    auto bn = seq->at<nn::BatchNorm2d>(0);
    EXPECT_EQ(nn::fuse(*seq).size(), 1u);
    seq->to(kF64);
    seq->to(dev);
    seq->train(train);
    Tensor x = random_tensor({5, 4, 6, 6}, kF64, 61, dev).requires_grad_();
    Tensor y = (*seq)(x);
    std::string node = y.grad_fn() ? y.grad_fn()->name : "";
    Tensor g = random_tensor(y.shape(), kF64, 62, dev);
    sum(y * g).backward();
    return std::make_pair(node, std::vector<Tensor>{y.detach(), x.grad(), bn->weight.grad(),
                                                    bn->bias.grad(), bn->running_mean});
  };
  auto [node, on_gpu] = run(gpu(), 2, true);
  auto [cpu_node, on_cpu] = run(kCPU, 2, true);
  EXPECT_EQ(node, "batch_norm_relu_max_pool2d");
  EXPECT_EQ(cpu_node, "max_pool2d") << "the CPU composes";
  EXPECT_EQ(run(gpu(), 3, true).first, "max_pool2d") << "a 3 x 3 window is not fused";
  EXPECT_EQ(run(gpu(), 2, false).first, "max_pool2d") << "eval composes";
  const char* what[] = {"output", "input grad", "weight grad", "bias grad", "running_mean"};
  for (size_t i = 0; i < on_gpu.size(); ++i)
    EXPECT_LT(rel_err(on_gpu[i], host(on_cpu[i])), 1e-10) << what[i];
}

#endif  // LOOM_WITH_CUDA
