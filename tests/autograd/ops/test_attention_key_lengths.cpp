// The padding mask of scaled_dot_product_attention (Note [Key lengths] in
// autograd/ops/attention.cpp): with per-batch key lengths the output equals a float64 loop that
// attends over each row's valid keys only (with and without the causal mask, with grouped heads,
// 3-d inputs), padded keys get no gradient, gradients match finite differences, and wrong
// lengths (dtype, shape, values) are errors naming the op and the tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops/ops.h"

using namespace loom;

namespace {

// q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv) in float64, lengths per batch row ->
// (B, H, Tq, Dv): for each query, softmax over keys j < len[b] (and j <= i when causal) of
// q.k / sqrt(D), times v. Written as loops, sharing nothing with the op.
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v,
                              const std::vector<int64_t>& len, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1),
                Tk = k.size(2), Dv = v.size(3);
  const auto Q = q.contiguous().to_vector<double>(), K = k.contiguous().to_vector<double>(),
             V = v.contiguous().to_vector<double>();
  std::vector<double> out(size_t(B * H * Tq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t kh = h / (H / Hkv),
                      n = causal ? std::min(len[size_t(b)], i + 1) : len[size_t(b)];
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c)
            d += Q[size_t(((b * H + h) * Tq + i) * D + c)] *
                 K[size_t(((b * Hkv + kh) * Tk + j) * D + c)];
          s[size_t(j)] = d / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < n; ++j)
          for (int64_t c = 0; c < Dv; ++c)
            out[size_t(((b * H + h) * Tq + i) * Dv + c)] +=
                s[size_t(j)] / sum * V[size_t(((b * Hkv + kh) * Tk + j) * Dv + c)];
      }
  return out;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e300;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(AttentionKeyLengths, EqualsEachRowComputedOverItsValidKeys) {
  manual_seed(11);
  const Options f64{.dtype = kF64};
  const std::vector<int64_t> len{7, 3, 1};  // no padding, some, all but one key
  Tensor lengths = from_vector<int64_t>({7, 3, 1}, {3});
  for (int64_t hkv : {4, 2})  // multi-head and grouped-query
    for (bool causal : {false, true}) {
      Tensor q = randn({3, 4, 7, 5}, f64), k = randn({3, hkv, 7, 5}, f64),
             v = randn({3, hkv, 7, 3}, f64);
      Tensor y = scaled_dot_product_attention(q, k, v, lengths, causal);
      EXPECT_LE(max_diff(y.to_vector<double>(), reference(q, k, v, len, causal)), 1e-13)
          << "Hkv " << hkv << " causal " << causal;
    }
}

// int32 lengths, 3-d inputs (N, T, D), float32: the same values as the float64 loop.
TEST(AttentionKeyLengths, Int32LengthsAndThreeDimensionalInputs) {
  manual_seed(12);
  Tensor q = randn({2, 6, 8}), k = randn({2, 6, 8}), v = randn({2, 6, 8});
  Tensor lengths = from_vector<int32_t>({4, 6}, {2});
  Tensor y = scaled_dot_product_attention(q, k, v, lengths);
  std::vector<double> want = reference(q.to(kF64).view({2, 1, 6, 8}), k.to(kF64).view({2, 1, 6, 8}),
                                       v.to(kF64).view({2, 1, 6, 8}), {4, 6}, false);
  EXPECT_LE(max_diff(y.to_vector<double>(), want), 1e-5);  // float32 roundings of sums of ~8 terms
}

// The padded keys and values have zero weight, so they get exactly zero gradient; the valid
// ones match finite differences.
TEST(AttentionKeyLengths, GradientsMatchFiniteDifferencesAndSkipPaddedKeys) {
  manual_seed(13);
  const Options f64{.dtype = kF64};
  Tensor lengths = from_vector<int64_t>({5, 2}, {2});
  std::vector<Tensor> in{randn({2, 2, 5, 3}, f64).requires_grad_(true),
                         randn({2, 2, 5, 3}, f64).requires_grad_(true),
                         randn({2, 2, 5, 4}, f64).requires_grad_(true)};
  for (bool causal : {false, true}) {
    auto f = [&](const std::vector<Tensor>& x) {
      return scaled_dot_product_attention(x[0], x[1], x[2], lengths, causal);
    };
    autograd::GradcheckResult r = autograd::gradcheck(f, in);
    EXPECT_TRUE(r.ok) << "causal " << causal << ": " << r.message;
  }
  Tensor k = in[1].detach().requires_grad_(true), v = in[2].detach().requires_grad_(true);
  scaled_dot_product_attention(in[0].detach(), k, v, lengths).sum().backward();
  EXPECT_EQ(max(abs(k.grad().slice(0, 1, 2).slice(2, 2, 5))).item(), 0.0);
  EXPECT_EQ(max(abs(v.grad().slice(0, 1, 2).slice(2, 2, 5))).item(), 0.0);
  EXPECT_GT(max(abs(v.grad().slice(0, 1, 2).slice(2, 0, 2))).item(), 0.0);
}

TEST(AttentionKeyLengths, CompositeTakesTheLengthsToo) {
  manual_seed(14);
  Tensor q = randn({2, 2, 4, 4}), k = randn({2, 2, 4, 4}), v = randn({2, 2, 4, 4});
  Tensor lengths = from_vector<int64_t>({4, 3}, {2});
  Tensor a = scaled_dot_product_attention(q, k, v, lengths, true);
  Tensor b = scaled_dot_product_attention_composite(q, k, v, lengths, true);
  EXPECT_EQ(max(abs(a - b)).item(), 0.0);
}

TEST(AttentionKeyLengths, WrongLengthsAreErrorsNamingThem) {
  Tensor q = randn({2, 2, 4, 4}), k = randn({2, 2, 4, 4}), v = randn({2, 2, 4, 4});
  auto call = [&](const Tensor& lengths) {
    return what([&] { scaled_dot_product_attention(q, k, v, lengths); });
  };
  std::string m = call(from_vector<float>({4, 3}, {2}));
  EXPECT_NE(m.find("scaled_dot_product_attention: key_lengths must be int32 or int64"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  m = call(from_vector<int64_t>({4, 3, 2}, {3}));
  EXPECT_NE(m.find("key_lengths must be (2)"), std::string::npos) << m;
  EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  m = call(from_vector<int64_t>({4, 3}, {2, 1}));
  EXPECT_NE(m.find("key_lengths must be (2)"), std::string::npos) << m;
  m = call(from_vector<int64_t>({4, 0}, {2}));
  EXPECT_NE(m.find("key_lengths holds 0, outside [1, Tk = 4]"), std::string::npos) << m;
  m = call(from_vector<int64_t>({5, 1}, {2}));
  EXPECT_NE(m.find("key_lengths holds 5"), std::string::npos) << m;
}
