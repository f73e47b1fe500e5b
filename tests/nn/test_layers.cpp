// nn layers: forward against hand-written loops (Linear, Conv2d), PyTorch's default init bounds
// and seed determinism, BatchNorm/Dropout in train and eval, shapes of the other layers, losses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"

using namespace loom;
using namespace loom::nn;

namespace {
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
}  // namespace

TEST(Linear, ForwardMatchesLoop) {
  manual_seed(3);
  auto fc = std::make_shared<Linear>(5, 4);
  fc->to(kF64);
  Tensor x = randn({3, 5}, {.dtype = kF64});
  auto X = x.to_vector<double>(), W = fc->weight.to_vector<double>(),
       B = fc->bias.to_vector<double>();
  std::vector<double> want(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = B[j];
      for (int k = 0; k < 5; ++k) s += X[i * 5 + k] * W[j * 5 + k];
      want[i * 4 + j] = s;
    }
  Tensor y = (*fc)(x);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_LT(max_abs_diff(y.to_vector<double>(), want), 1e-12);
  // Leading dims pass through; a wrong feature count names the layer.
  EXPECT_EQ(fc->forward(randn({2, 3, 5}, {.dtype = kF64})).shape(), (Shape{2, 3, 4}));
  EXPECT_THROW(fc->forward(randn({3, 6}, {.dtype = kF64})), Error);
  EXPECT_EQ(Linear(5, 4, false).named_parameters().size(), 1u);
}

// The CPU backend's BatchNorm + ReLU + MaxPool2d(2) (the reference the CUDA kernels are tested
// against; Note [Batch norm into max pool]) against max_pool2d(relu(batch_norm(x))) with autograd,
// float64: output, running statistics and the three gradients, the ReLU's mask and the pooling's
// argmax recomputed in the backward.
TEST(BatchNorm2d, FusedBatchNormReluMaxPoolMatchesTheComposite) {
  const int64_t N = 3, C = 4, H = 6, W = 4;
  Generator gen(21);
  Tensor x = randn({N, C, H, W}, {.dtype = kF64}, &gen);
  Tensor w = from_vector<double>({1.5, -0.5, 0.8, 1.0}, {C});
  Tensor b = from_vector<double>({0.1, 0.2, -0.3, 0.0}, {C});
  Tensor rm1 = zeros({C}, {.dtype = kF64}), rv1 = ones({C}, {.dtype = kF64});
  Tensor rm2 = rm1.clone(), rv2 = rv1.clone();
  Backend& be = backend_for(Device{});
  BatchNormOut o = be.batch_norm_relu_max_pool2(x, w, b, rm1, rv1, 0.1, 1e-5);

  Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_(),
         br = b.clone().requires_grad_();
  Tensor y = max_pool2d(relu(batch_norm(xr, wr, br, rm2, rv2, true, 0.1, 1e-5)), Pool2dParams{});
  ASSERT_EQ(o.y.shape(), (Shape{N, C, H / 2, W / 2}));
  Tensor g = randn(y.shape(), {.dtype = kF64}, &gen);
  sum(y * g).backward();
  BatchNormGrads r = be.batch_norm_relu_max_pool2_backward(g, x, w, b, o.save_mean, o.save_invstd);

  const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
      {"output", {o.y, y.detach()}},
      {"running_mean", {rm1, rm2}},
      {"running_var", {rv1, rv2}},
      {"input grad", {r.grad_input, xr.grad()}},
      {"weight grad", {r.grad_weight, wr.grad()}},
      {"bias grad", {r.grad_bias, br.grad()}}};
  for (const auto& [what, t] : pairs) {
    auto a = t.first.to_vector<double>(), e = t.second.to_vector<double>();
    ASSERT_EQ(a.size(), e.size()) << what;
    for (size_t j = 0; j < a.size(); ++j)
      EXPECT_NEAR(a[j], e[j], 1e-12 * (1 + std::fabs(e[j]))) << what << " " << j;
  }
  // Some windows are all zero after the ReLU (their gradient stops there), most are not.
  auto out = o.y.to_vector<double>();
  const auto zeros_out = std::count(out.begin(), out.end(), 0.0);
  EXPECT_GT(zeros_out, 0);
  EXPECT_LT(zeros_out, int64_t(out.size()) / 2);
}

TEST(Conv2d, ForwardMatchesLoop) {
  manual_seed(4);
  const int N = 2, C = 4, H = 7, W = 6, K = 6, R = 3, S = 2, G = 2, sh = 2, sw = 1, ph = 1, pw = 2,
            dh = 1, dw = 2;
  auto conv = std::make_shared<Conv2d>(
      C, K, IntPair{R, S},
      Conv2dOptions{.stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw}, .groups = G});
  conv->to(kF64);
  EXPECT_EQ(conv->weight.shape(), (Shape{K, C / G, R, S}));
  Tensor x = randn({N, C, H, W}, {.dtype = kF64});
  Tensor y = (*conv)(x);
  const int P = (H + 2 * ph - dh * (R - 1) - 1) / sh + 1,
            Q = (W + 2 * pw - dw * (S - 1) - 1) / sw + 1;
  ASSERT_EQ(y.shape(), (Shape{N, K, P, Q}));
  auto X = x.to_vector<double>(), Wt = conv->weight.to_vector<double>(),
       B = conv->bias.to_vector<double>();
  std::vector<double> want(size_t(N * K * P * Q));
  const int Cg = C / G, Kg = K / G;
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          double s = B[k];
          int g = k / Kg;
          for (int c = 0; c < Cg; ++c)
            for (int r = 0; r < R; ++r)
              for (int t = 0; t < S; ++t) {
                int h = p * sh - ph + r * dh, w = q * sw - pw + t * dw;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                s += X[((n * C + g * Cg + c) * H + h) * W + w] * Wt[((k * Cg + c) * R + r) * S + t];
              }
          want[((n * K + k) * P + p) * Q + q] = s;
        }
  EXPECT_LT(max_abs_diff(y.to_vector<double>(), want), 1e-12);
  EXPECT_THROW(conv->forward(randn({1, 3, 5, 5}, {.dtype = kF64})), Error);
  EXPECT_THROW(Conv2d(3, 4, 3, Conv2dOptions{.groups = 2}), Error);
}

TEST(Init, DefaultBoundsAsPyTorch) {
  manual_seed(5);
  Linear fc(100, 50);
  double bound = 1.0 / std::sqrt(100.0);
  auto check = [](const Tensor& t, double b) {
    double mx = 0, mean = 0;
    auto v = t.to_vector<double>();
    for (double x : v) {
      EXPECT_LE(std::abs(x), b);
      mx = std::max(mx, std::abs(x));
      mean += x / double(v.size());
    }
    if (v.size() < 50) return;           // too few draws for the statistics below
    EXPECT_GT(mx, 0.9 * b);              // fills the range
    EXPECT_LT(std::abs(mean), 0.2 * b);  // centred
  };
  check(fc.weight, bound);
  check(fc.bias, bound);
  Conv2d conv(3, 8, 3);
  check(conv.weight, 1.0 / std::sqrt(27.0));
  check(conv.bias, 1.0 / std::sqrt(27.0));
  BatchNorm2d bn(6);
  EXPECT_EQ(bn.weight.to_vector<float>(), std::vector<float>(6, 1.0f));
  EXPECT_EQ(bn.bias.to_vector<float>(), std::vector<float>(6, 0.0f));
}

TEST(Init, SeedMakesInitReproducible) {
  manual_seed(42);
  Linear a(6, 7);
  manual_seed(42);
  Linear b(6, 7);
  Linear c(6, 7);  // the stream has moved on
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  EXPECT_EQ(a.bias.to_vector<float>(), b.bias.to_vector<float>());
  EXPECT_NE(a.weight.to_vector<float>(), c.weight.to_vector<float>());
}

TEST(Init, Functions) {
  using namespace loom::nn::init;
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::LeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
  Tensor w = zeros({20, 10, 3, 3}, {.requires_grad = true});
  EXPECT_EQ(calculate_fan_in_and_fan_out(w), (std::pair<int64_t, int64_t>{90, 180}));
  EXPECT_THROW(calculate_fan_in_and_fan_out(zeros({4})), Error);

  manual_seed(9);
  xavier_uniform_(w);  // allowed on a tensor that requires grad (runs under NoGradGuard)
  double a = std::sqrt(6.0 / 270.0);
  for (float v : w.to_vector<float>()) EXPECT_LE(std::abs(v), a);
  kaiming_normal_(w, 0.0, FanMode::FanOut, Nonlinearity::ReLU);
  double var = 0;
  auto v = w.to_vector<double>();
  for (double x : v) var += x * x / double(v.size());
  EXPECT_NEAR(std::sqrt(var), std::sqrt(2.0 / 180.0), 0.05 * std::sqrt(2.0 / 180.0));
  Tensor u = zeros({1000}, {.dtype = kF64});
  uniform_(u, 2.0, 3.0);
  for (double x : u.to_vector<double>()) EXPECT_TRUE(x >= 2.0 && x < 3.0);
  normal_(u, 5.0, 0.5);
  EXPECT_NEAR(u.mean().item(), 5.0, 0.1);
  ones_(u);
  EXPECT_EQ(u.sum().item(), 1000.0);
  constant_(u, -2.0);
  EXPECT_EQ(u.sum().item(), -2000.0);
  zeros_(u);
  EXPECT_EQ(u.sum().item(), 0.0);
}

TEST(BatchNorm2d, TrainUsesBatchStatsAndUpdatesRunningStats) {
  manual_seed(6);
  BatchNorm2d bn(3);
  bn.to(kF64);
  Tensor x = randn({4, 3, 2, 5}, {.dtype = kF64}) * 2.0 + 1.0;
  Tensor y = bn(x);
  auto X = x.to_vector<double>(), Y = y.to_vector<double>();
  auto rm = bn.running_mean.to_vector<double>(), rv = bn.running_var.to_vector<double>();
  const int n = 4 * 2 * 5;
  for (int c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < 10; ++i) mean += X[(b * 3 + c) * 10 + i] / n;
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < 10; ++i) var += std::pow(X[(b * 3 + c) * 10 + i] - mean, 2) / n;
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < 10; ++i)
        EXPECT_NEAR(Y[(b * 3 + c) * 10 + i],
                    (X[(b * 3 + c) * 10 + i] - mean) / std::sqrt(var + 1e-5), 1e-10);
    EXPECT_NEAR(rm[c], 0.1 * mean, 1e-12);
    EXPECT_NEAR(rv[c], 0.9 + 0.1 * var * n / (n - 1), 1e-12);  // unbiased variance
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);

  // Eval: the running statistics, no update.
  bn.eval();
  Tensor y2 = bn(x);
  auto Y2 = y2.to_vector<double>();
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 4; ++b)
      for (int i = 0; i < 10; ++i)
        EXPECT_NEAR(Y2[(b * 3 + c) * 10 + i],
                    (X[(b * 3 + c) * 10 + i] - rm[c]) / std::sqrt(rv[c] + 1e-5), 1e-10);
  EXPECT_EQ(bn.running_mean.to_vector<double>(), rm);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
}

TEST(BatchNorm2d, CumulativeAverageAndNoRunningStats) {
  manual_seed(7);
  BatchNorm2d bn(2, BatchNormOptions{.momentum = std::nullopt});
  bn.to(kF64);
  Tensor x1 = randn({3, 2, 2, 2}, {.dtype = kF64}), x2 = randn({3, 2, 2, 2}, {.dtype = kF64}) + 3.0;
  bn(x1);
  bn(x2);
  // Factor 1 then 1/2: the running mean is the average of the two batch means.
  auto m1 = x1.mean({0, 2, 3}).to_vector<double>(), m2 = x2.mean({0, 2, 3}).to_vector<double>();
  auto rm = bn.running_mean.to_vector<double>();
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(rm[c], 0.5 * (m1[c] + m2[c]), 1e-12);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);

  BatchNorm2d plain(2, BatchNormOptions{.affine = false, .track_running_stats = false});
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_TRUE(plain.named_buffers().empty());
  plain.eval();  // still batch statistics
  Tensor y = plain(randn({5, 2, 3, 3}) * 4.0 + 2.0);
  auto mean = y.mean({0, 2, 3}).to_vector<float>();
  for (float v : mean) EXPECT_NEAR(v, 0.0f, 1e-5f);
}

TEST(Dropout, TrainDropsEvalPasses) {
  manual_seed(8);
  Dropout d(0.5);
  Tensor x = ones({1000});
  auto y = d(x).to_vector<float>();
  int zeros_seen = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
    zeros_seen += v == 0.0f;
  }
  EXPECT_GT(zeros_seen, 400);
  EXPECT_LT(zeros_seen, 600);
  d.eval();
  EXPECT_EQ(d(x).to_vector<float>(), x.to_vector<float>());
  EXPECT_THROW(Dropout(1.5), Error);
}

TEST(LayerNorm, NormalisesTrailingDims) {
  manual_seed(10);
  LayerNorm ln({3, 4});
  EXPECT_EQ(ln.weight.shape(), (Shape{3, 4}));
  Tensor x = randn({2, 3, 4}, {.dtype = kF64});
  ln.to(kF64);
  auto X = x.to_vector<double>(), Y = ln(x).to_vector<double>();
  for (int b = 0; b < 2; ++b) {
    double mean = 0, var = 0;
    for (int i = 0; i < 12; ++i) mean += X[b * 12 + i] / 12;
    for (int i = 0; i < 12; ++i) var += std::pow(X[b * 12 + i] - mean, 2) / 12;
    for (int i = 0; i < 12; ++i)
      EXPECT_NEAR(Y[b * 12 + i], (X[b * 12 + i] - mean) / std::sqrt(var + 1e-5), 1e-10);
  }
  EXPECT_THROW(ln(randn({2, 4, 3}, {.dtype = kF64})), Error);
}

TEST(Layers, ShapesOfPoolingFlattenActivations) {
  Tensor x = randn({2, 3, 8, 6});
  EXPECT_EQ(MaxPool2d(2)(x).shape(), (Shape{2, 3, 4, 3}));
  EXPECT_EQ(MaxPool2d(3, MaxPool2dOptions{.stride = 1, .padding = 1})(x).shape(),
            (Shape{2, 3, 8, 6}));
  EXPECT_EQ(AvgPool2d({2, 3})(x).shape(), (Shape{2, 3, 4, 2}));
  EXPECT_EQ(AdaptiveAvgPool2d(1)(x).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(AdaptiveAvgPool2d({3, 2})(x).shape(), (Shape{2, 3, 3, 2}));
  EXPECT_EQ(Flatten()(x).shape(), (Shape{2, 144}));
  EXPECT_EQ(Flatten(2)(x).shape(), (Shape{2, 3, 48}));
  // Values: max pooling picks the largest of each window; avg pooling the mean.
  Tensor a = arange(0, 16, 1, {.dtype = kF32}).view({1, 1, 4, 4});
  EXPECT_EQ(MaxPool2d(2)(a).to_vector<float>(), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(AvgPool2d(2)(a).to_vector<float>(), (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  EXPECT_EQ(AdaptiveAvgPool2d(1)(a).item(), 7.5);
  Tensor r = from_vector<float>({-1, 0, 2}, {3});
  EXPECT_EQ(ReLU()(r).to_vector<float>(), (std::vector<float>{0, 0, 2}));
  auto g = GELU()(r).to_vector<float>();
  EXPECT_NEAR(g[0], -1 * 0.5 * (1 + std::erf(-1 / std::sqrt(2.0))), 1e-6);
  EXPECT_NEAR(g[2], 2 * 0.5 * (1 + std::erf(2 / std::sqrt(2.0))), 1e-6);
  EXPECT_THROW(MaxPool2d(2)(randn({3, 4})), Error);
}

TEST(Layers, GeluApproximateTanhIsGpt2sFormulaAndOtherNamesAreErrors) {
  Tensor x = from_vector<double>({-3, -1, -0.25, 0, 0.5, 2}, {6});
  auto exact = GELU()(x).to_vector<double>(), tanh_form = GELU("tanh")(x).to_vector<double>();
  const double pi = 3.14159265358979323846;
  auto xs = x.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    double v = xs[i];
    EXPECT_NEAR(exact[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(tanh_form[i],
                0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v))), 1e-12);
  }
  EXPECT_GT(std::fabs(exact[1] - tanh_form[1]), 1e-5);  // the two forms differ
  std::ostringstream a, b;
  a << GELU();
  b << GELU("tanh");
  EXPECT_EQ(a.str(), "GELU(approximate='none')");
  EXPECT_EQ(b.str(), "GELU(approximate='tanh')");
  try {
    GELU bad("erf");
    ADD_FAILURE() << "GELU(\"erf\") was accepted";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("GELU: approximate is 'erf'"), std::string::npos) << m;
    EXPECT_NE(m.find("'tanh'"), std::string::npos) << m;
  }
}

TEST(Loss, ModulesMatchFormulas) {
  Tensor logits = from_vector<double>({1, 2, 3, 0.5, -1, 2}, {2, 3});
  Tensor target = from_vector<int64_t>({2, 0}, {2});
  auto lse = [](double a, double b, double c) {
    return std::log(std::exp(a) + std::exp(b) + std::exp(c));
  };
  double l0 = lse(1, 2, 3) - 3, l1 = lse(0.5, -1, 2) - 0.5;
  EXPECT_NEAR(CrossEntropyLoss()(logits, target).item(), (l0 + l1) / 2, 1e-12);
  EXPECT_NEAR(CrossEntropyLoss({.reduction = Reduction::Sum})(logits, target).item(), l0 + l1,
              1e-12);
  // Label smoothing eps: (1 - eps) * nll + eps * mean over classes of -log p.
  double eps = 0.1;
  double u0 = (3 * lse(1, 2, 3) - 6) / 3, u1 = (3 * lse(0.5, -1, 2) - 1.5) / 3;
  EXPECT_NEAR(CrossEntropyLoss({.label_smoothing = eps})(logits, target).item(),
              ((1 - eps) * l0 + eps * u0 + (1 - eps) * l1 + eps * u1) / 2, 1e-12);
  EXPECT_NEAR(NLLLoss()(log_softmax(logits, 1), target).item(), (l0 + l1) / 2, 1e-12);
  Tensor a = from_vector<double>({1, 2, 3}, {3}), b = from_vector<double>({0, 2, 5}, {3});
  EXPECT_NEAR(MSELoss()(a, b).item(), 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(MSELoss(Reduction::Sum)(a, b).item(), 5.0, 1e-12);
  EXPECT_THROW(MSELoss()(a, zeros({2}, {.dtype = kF64})), Error);
  EXPECT_THROW(CrossEntropyLoss({.label_smoothing = 1.0}), Error);
}
