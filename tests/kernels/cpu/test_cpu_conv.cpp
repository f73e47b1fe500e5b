// kernels/cpu: the im2col + GEMM convolution against the direct loops (all three directions, many
// geometries including the CNN example's layers), max pooling against its definition, and
// batch_norm's statistics and running-stat update checked against values worked out by hand, its
// float32 kernels (row sums in float) against the float64 ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_conv.h"
#include "kernels/raw_ops.h"

using namespace loom;

namespace {

cpu::CpuBackend& be() { return cpu::cpu_backend(); }

Tensor randn_t(const Shape& s, DType dt, uint64_t seed) {
  Tensor t = empty(s, {.dtype = dt});
  be().random_(t, RandomKind::Normal, 0.0, 1.0, seed, 0);
  return t;
}

std::vector<double> values(const Tensor& t) {
  Tensor d = raw::contiguous(raw::cast(t, kF64));
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

// Every element within tol * max(1, |want|, rms(want)): float32 sums of many products err by
// about eps * sqrt(terms) * (typical term), which the output's rms measures, even where a sum
// cancels to a small value.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  auto g = values(got), w = values(want);
  double rms = 0;
  for (double v : w) rms += v * v;
  rms = std::sqrt(rms / double(std::max<size_t>(w.size(), 1)));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - w[i]), tol * std::max({1.0, std::fabs(w[i]), rms}))
        << what << ": element " << i << " is " << g[i] << ", naive gives " << w[i];
}

struct ConvCase {
  std::string name;
  int64_t N, C, H, W, K, R, S;
  Conv2dParams p;
};

Conv2dParams params(int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  p.dilation = {dil, dil};
  p.groups = groups;
  return p;
}

std::vector<ConvCase> conv_cases() {
  Conv2dParams asym;
  asym.stride = {2, 1};
  asym.padding = {0, 2};
  asym.dilation = {1, 2};
  return {
      // The CNN example's three conv layers at a small batch.
      {"cnn_layer1", 3, 1, 28, 28, 32, 3, 3, params(1, 1)},
      {"cnn_layer2", 2, 32, 28, 28, 64, 3, 3, params(1, 1)},
      {"cnn_layer3", 2, 64, 14, 14, 128, 3, 3, params(1, 1)},
      {"single_image", 1, 8, 13, 11, 6, 3, 3, params(1, 1)},
      {"stride2_pad1", 5, 4, 17, 15, 7, 3, 3, params(2, 1)},
      {"stride3_kernel5", 3, 3, 20, 19, 4, 5, 5, params(3, 2)},
      {"dilation2", 4, 5, 16, 16, 6, 3, 3, params(1, 2, 2)},
      {"groups2", 3, 8, 12, 10, 6, 3, 3, params(1, 1, 1, 2)},
      {"depthwise", 2, 6, 9, 9, 6, 3, 3, params(1, 1, 1, 6)},
      {"pointwise", 4, 16, 7, 9, 24, 1, 1, params(1, 0)},
      {"pointwise_stride2", 3, 5, 8, 8, 7, 1, 1, params(2, 0)},
      {"nonsquare_kernel", 2, 3, 10, 12, 5, 2, 4, params(1, 0)},
      {"asymmetric_params", 3, 4, 11, 13, 5, 3, 2, asym},
      {"kernel_equals_input", 2, 3, 5, 5, 4, 5, 5, params(1, 0)},
      {"padding_wider_than_kernel", 2, 2, 4, 4, 3, 2, 2, params(1, 3)},
      // Images of one row or one pixel under a 3x3 "same" convolution (a ResNet's last stage on
      // a 32x32 image with the ImageNet stem): the flat path's kernel rows that fall entirely in
      // the padding.
      {"one_pixel_same_padding", 2, 4, 1, 1, 5, 3, 3, params(1, 1)},
      {"one_row_same_padding", 2, 3, 1, 6, 4, 3, 3, params(1, 1)},
      {"two_rows_5x5_same_padding", 2, 3, 2, 5, 4, 5, 5, params(1, 2)},
      // Same width but not same height (the flat im2col path with P != H).
      {"same_width_only", 2, 3, 9, 7, 4, 3, 3,
       [] {
         Conv2dParams p;
         p.padding = {0, 1};
         return p;
       }()},
      {"same_width_dilated_5x5", 2, 2, 8, 11, 3, 5, 5,
       [] {
         Conv2dParams p;
         p.padding = {1, 4};
         p.dilation = {1, 2};
         return p;
       }()},
  };
}

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class ConvVsNaive : public ::testing::TestWithParam<ConvCase> {};

void check_all_directions(const ConvCase& c, DType dt, double tol) {
  Shape xs{c.N, c.C, c.H, c.W}, ws{c.K, c.C / c.p.groups, c.R, c.S};
  Tensor x = randn_t(xs, dt, 1), w = randn_t(ws, dt, 2);
  Tensor y = be().conv2d(x, w, c.p);
  expect_close(y, cpu::conv2d_naive(x, w, c.p), tol, c.name + " forward");
  Tensor gy = randn_t(y.shape(), dt, 3);
  expect_close(be().conv2d_backward_input(gy, w, xs, c.p),
               cpu::conv2d_backward_input_naive(gy, w, xs, c.p), tol, c.name + " input gradient");
  expect_close(be().conv2d_backward_weight(gy, x, ws, c.p),
               cpu::conv2d_backward_weight_naive(gy, x, ws, c.p), tol, c.name + " weight gradient");
}

TEST_P(ConvVsNaive, Float64) { check_all_directions(GetParam(), kF64, 1e-10); }
TEST_P(ConvVsNaive, Float32) { check_all_directions(GetParam(), kF32, 1e-5); }

INSTANTIATE_TEST_SUITE_P(Shapes, ConvVsNaive, ::testing::ValuesIn(conv_cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) {
                           return info.param.name;
                         });

TEST(ConvCpu, HalfPrecisionComputesInFloat) {
  // f16/bf16 go through float32 and round once: the naive float64 result rounded to the same
  // type differs by at most about one rounding of the output (plus float32 summation error).
  ConvCase c{"half", 2, 4, 9, 9, 5, 3, 3, params(1, 1)};
  for (DType dt : {kF16, kBF16}) {
    Tensor x = randn_t({c.N, c.C, c.H, c.W}, dt, 4), w = randn_t({c.K, c.C, c.R, c.S}, dt, 5);
    Tensor y = be().conv2d(x, w, c.p);
    EXPECT_EQ(y.dtype(), dt);
    expect_close(y, cpu::conv2d_naive(x, w, c.p), dt == kF16 ? 2e-3 : 1.6e-2, dtype_name(dt));
  }
}

TEST(ConvCpu, NonContiguousInputs) {
  // x as a transposed view, w as a slice: the kernels copy them into NCHW first.
  Conv2dParams p = params(1, 1);
  Tensor xt = randn_t({2, 3, 9, 8}, kF64, 6);
  Tensor x = raw::transpose(xt, 2, 3);  // (2, 3, 8, 9), not contiguous
  Tensor wbig = randn_t({8, 3, 3, 3}, kF64, 7);
  Tensor w = raw::slice(wbig, 0, 1, 8, 2);  // (4, 3, 3, 3), every other filter
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(w.is_contiguous());
  expect_close(be().conv2d(x, w, p), cpu::conv2d_naive(raw::contiguous(x), raw::contiguous(w), p),
               1e-10, "strided forward");
}

TEST(ConvCpu, NaiveMatchesAHandComputedValue) {
  // 1 image, 1 channel, 3x3 input 1..9, 2x2 kernel of ones, padding 1, stride 2:
  // outputs are the sums of the 2x2 windows at (-1,-1), (-1,1), (1,-1), (1,1).
  std::vector<double> xv{1, 2, 3, 4, 5, 6, 7, 8, 9};
  Tensor x = from_vector(xv, {1, 1, 3, 3});
  Tensor w = from_vector(std::vector<double>(4, 1.0), {1, 1, 2, 2});
  Conv2dParams p = params(2, 1);
  auto y = values(cpu::conv2d_naive(x, w, p));
  EXPECT_EQ(y, (std::vector<double>{1, 2 + 3, 4 + 7, 5 + 6 + 8 + 9}));
  EXPECT_EQ(values(be().conv2d(x, w, p)), y);
}

// ------------------------------------------------------------------ pooling

TEST(PoolCpu, MaxPoolIndicesPointIntoEachPlane) {
  // One plane 4x4 holding 0..15: with kernel 2 stride 2 each window's max is its bottom-right.
  std::vector<double> xv(32);
  for (int i = 0; i < 32; ++i) xv[i] = i < 16 ? i : 31 - i;  // plane 1 is reversed
  Tensor x = from_vector(xv, {1, 2, 4, 4});
  Pool2dParams p;
  auto [y, idx] = be().max_pool2d(x, p);
  EXPECT_EQ(values(y), (std::vector<double>{5, 7, 13, 15, 15, 13, 7, 5}));
  EXPECT_EQ(values(idx), (std::vector<double>{5, 7, 13, 15, 0, 2, 8, 10}));
  Tensor gy = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 2, 2});
  auto gx = values(be().max_pool2d_backward(gy, idx, x.shape(), p));
  std::vector<double> want(32, 0.0);
  want[5] = 1, want[7] = 2, want[13] = 3, want[15] = 4;
  want[16 + 0] = 5, want[16 + 2] = 6, want[16 + 8] = 7, want[16 + 10] = 8;
  EXPECT_EQ(gx, want);
}

TEST(PoolCpu, MaxPoolBackwardRefusesAGradientOfTheWrongShape) {
  Tensor x = from_vector(std::vector<double>(32, 1.0), {1, 2, 4, 4});
  Pool2dParams p;  // 2x2, stride 2: the output is (1, 2, 2, 2)
  auto [y, idx] = be().max_pool2d(x, p);
  Tensor gy = from_vector(std::vector<double>(18, 1.0), {1, 2, 3, 3});
  std::string msg;
  try {
    be().max_pool2d_backward(gy, idx, x.shape(), p);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("max_pool2d_backward: grad_y [1, 2, 3, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [1, 2, 2, 2]"), std::string::npos) << msg;
}

TEST(PoolCpu, MaxPoolPaddingIsMinusInfinityAndNanWins) {
  // All-negative input with padding: the padded cells never win.
  Tensor x = from_vector(std::vector<double>{-5, -4, -3, -2}, {1, 1, 2, 2});
  Pool2dParams p;
  p.kernel = {2, 2}, p.stride = {1, 1}, p.padding = {1, 1};
  auto [y, idx] = be().max_pool2d(x, p);
  EXPECT_EQ(values(y), (std::vector<double>{-5, -4, -4, -3, -2, -2, -3, -2, -2}));
  EXPECT_EQ(values(idx), (std::vector<double>{0, 1, 1, 2, 3, 3, 2, 3, 3}));
  Tensor xn = from_vector(std::vector<double>{1, NAN, 3, 4}, {1, 1, 2, 2});
  Pool2dParams q;
  auto [yn, in] = be().max_pool2d(xn, q);
  EXPECT_TRUE(std::isnan(values(yn)[0]));
  EXPECT_EQ(values(in)[0], 1);
}

// The window-by-window definition: cells in (r, s) order, padding -inf, a cell takes over when it
// is larger than the best so far (the first maximum wins) or NaN. Returns values and indices.
std::pair<std::vector<double>, std::vector<double>> max_pool_by_definition(
    const std::vector<double>& x, int64_t planes, int64_t H, int64_t W, const Pool2dParams& p) {
  const int64_t P = (H + 2 * p.padding[0] - p.kernel[0]) / p.stride[0] + 1;
  const int64_t Q = (W + 2 * p.padding[1] - p.kernel[1]) / p.stride[1] + 1;
  std::vector<double> y, idx;
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t i = 0; i < P; ++i)
      for (int64_t j = 0; j < Q; ++j) {
        double best = -INFINITY;
        int64_t arg = -1;
        for (int64_t r = 0; r < p.kernel[0]; ++r)
          for (int64_t s = 0; s < p.kernel[1]; ++s) {
            int64_t h = i * p.stride[0] - p.padding[0] + r, w = j * p.stride[1] - p.padding[1] + s;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = x[size_t((c * H + h) * W + w)];
            if (arg < 0 || v > best || std::isnan(v)) best = v, arg = h * W + w;
          }
        y.push_back(best);
        idx.push_back(double(arg));
      }
  return {y, idx};
}

// Note [Max pooling 2 x 2]: MaxPool2d(2) has its own kernels; they and the general ones give the
// definition's values, indices and gradients on odd and even planes full of ties, NaNs and -inf,
// in float32 and float64.
TEST(PoolCpu, MaxPoolTwoByTwoAndGeneralKernelsMatchTheDefinition) {
  const int64_t planes = 6;
  for (auto [H, W] : {std::pair<int64_t, int64_t>{28, 28}, {7, 9}, {2, 2}, {5, 3}}) {
    std::vector<double> xv(size_t(planes * H * W));
    for (size_t i = 0; i < xv.size(); ++i) {
      uint64_t r = (i * 2654435761u + 12345) % 1000;  // a fixed scramble: ties are common
      xv[i] = r < 5 ? NAN : r < 30 ? -INFINITY : double(r % 4);
    }
    Pool2dParams two;  // 2 x 2, stride 2: the fast kernel
    Pool2dParams general;
    general.stride = {2, 1};
    for (const Pool2dParams& p : {two, general})
      for (DType dt : {kF32, kF64}) {
        std::string what = std::to_string(H) + "x" + std::to_string(W) + " stride " +
                           std::to_string(p.stride[1]) + " " + dtype_name(dt);
        auto [y, idx] = be().max_pool2d(raw::cast(from_vector(xv, {2, 3, H, W}), dt), p);
        auto [want_y, want_idx] = max_pool_by_definition(xv, planes, H, W, p);
        auto got_y = values(y);
        ASSERT_EQ(got_y.size(), want_y.size()) << what;
        for (size_t i = 0; i < got_y.size(); ++i)
          ASSERT_TRUE(got_y[i] == want_y[i] || (std::isnan(got_y[i]) && std::isnan(want_y[i])))
              << what << ": output " << i << " is " << got_y[i] << ", want " << want_y[i];
        EXPECT_EQ(values(idx), want_idx) << what;
        // Backward: each output's gradient added to the cell its index names, 0 elsewhere.
        std::vector<double> gyv(want_y.size()), want_gx(xv.size(), 0.0);
        const int64_t per_plane = int64_t(want_y.size()) / planes;
        for (size_t i = 0; i < gyv.size(); ++i) {
          gyv[i] = double(int64_t(i % 13) - 6);
          want_gx[size_t(int64_t(i) / per_plane * H * W + int64_t(want_idx[i]))] += gyv[i];
        }
        Tensor gy = raw::cast(from_vector(gyv, y.shape()), dt);
        EXPECT_EQ(values(be().max_pool2d_backward(gy, idx, {2, 3, H, W}, p)), want_gx) << what;
      }
  }
}

// ------------------------------------------------------------------ batch norm

TEST(BatchNormCpu, TrainingStatisticsAndRunningUpdateByHand) {
  // x: (N=2, C=2, L=2). Channel 0 holds {1, 2, 3, 4}, channel 1 holds {-1, 1, 3, 5}.
  Tensor x = from_vector(std::vector<double>{1, 2, -1, 1, 3, 4, 3, 5}, {2, 2, 2});
  Tensor w = from_vector(std::vector<double>{2.0, 0.5}, {2});
  Tensor b = from_vector(std::vector<double>{0.1, -0.2}, {2});
  Tensor rm = from_vector(std::vector<float>{0.5f, -1.0f}, {2});
  Tensor rv = from_vector(std::vector<float>{2.0f, 0.5f}, {2});
  const double eps = 1e-5, mom = 0.1;
  BatchNormOut o = be().batch_norm(x, w, b, rm, rv, true, mom, eps);
  // Channel 0: mean 2.5, biased var 1.25, unbiased 5/3. Channel 1: mean 2, biased var 5, unbiased
  // 20/3.
  auto m = values(o.save_mean), is = values(o.save_invstd);
  EXPECT_DOUBLE_EQ(m[0], 2.5);
  EXPECT_DOUBLE_EQ(m[1], 2.0);
  EXPECT_NEAR(is[0], 1 / std::sqrt(1.25 + eps), 1e-12);
  EXPECT_NEAR(is[1], 1 / std::sqrt(5.0 + eps), 1e-12);
  // running = 0.9 running + 0.1 batch (unbiased variance), stored in the stats' own float32.
  auto rmv = values(rm), rvv = values(rv);
  EXPECT_NEAR(rmv[0], 0.9 * 0.5 + 0.1 * 2.5, 1e-6);
  EXPECT_NEAR(rmv[1], 0.9 * -1.0 + 0.1 * 2.0, 1e-6);
  EXPECT_NEAR(rvv[0], 0.9 * 2.0 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(rvv[1], 0.9 * 0.5 + 0.1 * 20.0 / 3.0, 1e-6);
  // y = (x - mean) * invstd * w + b; first element: (1 - 2.5) / sqrt(1.25 + eps) * 2 + 0.1.
  auto y = values(o.y);
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + eps) * 2 + 0.1, 1e-12);
  EXPECT_NEAR(y[3], (1 - 2.0) / std::sqrt(5.0 + eps) * 0.5 - 0.2, 1e-12);

  // Eval: the (updated) running stats normalise; nothing is updated or saved.
  BatchNormOut e = be().batch_norm(x, w, b, rm, rv, false, mom, eps);
  EXPECT_FALSE(e.save_mean.defined());
  EXPECT_NEAR(values(e.y)[0], (1 - rmv[0]) / std::sqrt(rvv[0] + eps) * 2 + 0.1, 1e-6);
  EXPECT_EQ(values(rm), rmv);
}

TEST(BatchNormCpu, WithoutRunningStatsOrAffine) {
  Tensor x = from_vector(std::vector<double>{1, 2, 3, 4}, {4, 1});
  BatchNormOut o = be().batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 0.0);
  // No running stats: batch statistics even in eval. mean 2.5, var 1.25.
  auto y = values(o.y);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], (i + 1 - 2.5) / std::sqrt(1.25), 1e-12);
  BatchNormGrads g = be().batch_norm_backward(from_vector(std::vector<double>{1, 0, 0, 0}, {4, 1}),
                                              x, Tensor(), Tensor(), o.save_mean, o.save_invstd);
  EXPECT_FALSE(g.grad_weight.defined());
  // dx_i = invstd (dy_i - mean(dy) - xhat_i mean(dy xhat)); dy = e_0, xhat_0 = -1.5 invstd.
  double invstd = 1 / std::sqrt(1.25), xh0 = -1.5 * invstd;
  auto gx = values(g.grad_input);
  for (int i = 0; i < 4; ++i) {
    double xhi = (i + 1 - 2.5) * invstd;
    EXPECT_NEAR(gx[i], invstd * ((i == 0) - 0.25 - xhi * xh0 / 4), 1e-12) << i;
  }
}

// Note [Batch norm sums]: float32 batch norm sums each row of L values in float. At the cnn's row
// length (28 x 28), on data far from zero mean (where a careless sum loses digits), the float32
// statistics, output and gradients stay within float32 rounding of the float64 kernels' on the
// same values, with and without the fused ReLU and the affine weight.
TEST(BatchNormCpu, Float32RowSumsMatchFloat64) {
  const Shape shape{6, 3, 28, 28};
  Tensor x32 = empty(shape, {.dtype = kF32});  // mean 3, standard deviation 0.25
  be().random_(x32, RandomKind::Normal, 3.0, 0.25, 11, 0);
  Tensor gy32 = randn_t(shape, kF32, 12);
  Tensor w32 = from_vector(std::vector<float>{1.5f, -0.5f, 2.0f}, {3});
  Tensor b32 = from_vector(std::vector<float>{0.1f, 0.2f, -0.3f}, {3});
  Tensor x64 = raw::cast(x32, kF64), gy64 = raw::cast(gy32, kF64);
  for (bool relu : {false, true}) {
    for (bool affine : {true, false}) {
      std::string what = std::string(relu ? "relu" : "no relu") + (affine ? ", affine" : "");
      Tensor w = affine ? w32 : Tensor(), b = affine ? b32 : Tensor();
      BatchNormOut f = be().batch_norm(x32, w, b, Tensor(), Tensor(), true, 0.1, 1e-5, relu);
      BatchNormOut d = be().batch_norm(x64, affine ? raw::cast(w32, kF64) : Tensor(),
                                       affine ? raw::cast(b32, kF64) : Tensor(), Tensor(), Tensor(),
                                       true, 0.1, 1e-5, relu);
      expect_close(raw::cast(f.save_mean, kF64), d.save_mean, 1e-6, what + ": mean");
      expect_close(raw::cast(f.save_invstd, kF64), d.save_invstd, 1e-5, what + ": invstd");
      expect_close(raw::cast(f.y, kF64), d.y, 2e-5, what + ": y");
      BatchNormGrads gf = be().batch_norm_backward(gy32, x32, w, b, f.save_mean, f.save_invstd,
                                                   relu ? f.y : Tensor());
      BatchNormGrads gd =
          be().batch_norm_backward(gy64, x64, affine ? raw::cast(w32, kF64) : Tensor(),
                                   affine ? raw::cast(b32, kF64) : Tensor(), d.save_mean,
                                   d.save_invstd, relu ? d.y : Tensor());
      expect_close(raw::cast(gf.grad_input, kF64), gd.grad_input, 2e-5, what + ": dx");
      if (affine) {
        expect_close(raw::cast(gf.grad_weight, kF64), raw::cast(gd.grad_weight, kF64), 2e-5,
                     what + ": dw");
        expect_close(raw::cast(gf.grad_bias, kF64), raw::cast(gd.grad_bias, kF64), 2e-5,
                     what + ": db");
      }
    }
  }
}

}  // namespace
