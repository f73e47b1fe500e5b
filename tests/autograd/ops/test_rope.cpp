// rope (autograd/ops/rope.h): Llama 3.1's frequencies fall in transformers' three regimes at the
// head indices worked out by hand; the fused op against its composite (values and gradients, an
// offset and a positions tensor); the KV cache's view (a suffix at its offset is the suffix of the
// whole sequence, bit for bit); a positions tensor equal to the offset's; the rotation keeps each
// pair's length; the input's layout is kept; a large offset grows the table; errors. The forward
// against float64 loops and the gradients against finite differences are the op table's rows
// (tests/autograd/cases_llama.cpp); CUDA's kernel: tests/kernels/cuda/attention/test_cuda_rope.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/ops/ops.h"

using namespace loom;

namespace {

double max_abs(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

RopeConfig llama31() {
  RopeConfig c;
  c.llama3 = RopeLlama3Scaling{};  // factor 8, low 1, high 4, original 8192; theta 500000
  return c;
}

}  // namespace

// D = 128: wavelen_k = 2 pi 500000^(k / 64). Kept while wavelen < 8192 / 4 = 2048 (k <= 28:
// 1957 at k = 28, 2402 at 29), divided by 8 once wavelen > 8192 (k >= 35: 8221; 6697 at 34), and
// interpolated between.
TEST(Rope, Llama31FrequenciesFollowTheThreeRegimes) {
  const std::vector<double> f = rope_inv_freq(llama31(), 128);
  ASSERT_EQ(f.size(), 64u);
  const double kPi = 3.14159265358979323846;
  for (int64_t k = 0; k < 64; ++k) {
    SCOPED_TRACE(k);
    const double base = std::pow(500000.0, -double(k) / 64.0);
    if (k <= 28) {
      EXPECT_DOUBLE_EQ(f[size_t(k)], base);
    } else if (k >= 35) {
      EXPECT_DOUBLE_EQ(f[size_t(k)], base / 8.0);
    } else {
      const double smooth = (8192.0 * base / (2 * kPi) - 1.0) / 3.0;
      EXPECT_GT(smooth, 0.0);
      EXPECT_LT(smooth, 1.0);
      EXPECT_NEAR(f[size_t(k)], (1 - smooth) * base / 8.0 + smooth * base, 1e-15);
    }
  }
  const std::vector<double> plain = rope_inv_freq(RopeConfig{}, 128);
  EXPECT_DOUBLE_EQ(plain[1], std::pow(500000.0, -2.0 / 128.0));
}

TEST(Rope, FusedMatchesTheCompositeWithAnOffsetAndWithPositions) {
  manual_seed(1);
  for (DType d : {kF32, kF64}) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x0 = randn({2, 3, 7, 16}).to(d), g = randn({2, 3, 7, 16}).to(d);
    Tensor pos = randint(0, 8192, {2, 7});
    for (int which = 0; which < 2; ++which) {
      Tensor xf = x0.detach().requires_grad_(true), xc = x0.detach().requires_grad_(true);
      Tensor yf = which ? rope(xf, pos, llama31()) : rope(xf, 5, llama31());
      Tensor yc = which ? rope_composite(xc, pos, llama31()) : rope_composite(xc, 5, llama31());
      (yf * g).sum().backward();
      (yc * g).sum().backward();
      const double tol = d == kF64 ? 1e-12 : 1e-5;
      EXPECT_LE(max_abs(yf, yc), tol) << "positions tensor: " << which;
      EXPECT_LE(max_abs(xf.grad(), xc.grad()), tol) << "positions tensor: " << which;
    }
  }
}

// Decoding with a KV cache rotates the new rows at offset = the cached length: the same values as
// rotating the whole sequence and keeping its tail.
TEST(Rope, ASuffixAtItsOffsetIsTheSuffixOfTheWholeSequence) {
  manual_seed(2);
  Tensor x = randn({1, 2, 9, 8});
  Tensor whole = rope(x, 0, llama31());
  Tensor tail = rope(contiguous(x.slice(2, 6, 9)), 6, llama31());
  EXPECT_EQ(max_abs(tail, whole.slice(2, 6, 9)), 0.0);
  Tensor p = arange(6, 9, 1, {.dtype = kI64});
  EXPECT_EQ(max_abs(rope(x.slice(2, 6, 9), p, llama31()), tail), 0.0);
}

TEST(Rope, KeepsEachPairsLengthAndTheInputsLayout) {
  manual_seed(3);
  Tensor btHd = randn({2, 5, 3, 8});  // (B, T, H, D), as a projection makes it
  Tensor x = btHd.transpose(1, 2);    // (B, H, T, D) view
  Tensor y = rope(x, 11, RopeConfig{});
  EXPECT_EQ(y.strides(), x.strides()) << "a dense input's layout is kept";
  auto pair_norms = [](const Tensor& t) {
    return sqrt(square(t.slice(3, 0, 4)) + square(t.slice(3, 4, 8)));
  };
  EXPECT_LE(max_abs(pair_norms(y), pair_norms(x)), 1e-5);
  Tensor back = rope(y, 11, RopeConfig{});  // not the inverse: rotated twice
  EXPECT_GT(max_abs(back, x), 1e-2);
}

TEST(Rope, AFarOffsetGrowsTheTable) {
  manual_seed(4);
  Tensor x = randn({1, 1, 3, 8}, {.dtype = kF64});
  EXPECT_LE(max_abs(rope(x, 300000, RopeConfig{}), rope_composite(x, 300000, RopeConfig{})), 1e-12);
}

TEST(Rope, ErrorsNameTheOpAndTheValues) {
  Tensor x = randn({1, 2, 3, 8});
  std::string m = what([&] { rope(randn({1, 2, 3, 7}), 0, RopeConfig{}); });
  EXPECT_NE(m.find("rope"), std::string::npos) << m;
  EXPECT_NE(m.find("even"), std::string::npos) << m;
  m = what([&] { rope(randn({2, 3, 8}), 0, RopeConfig{}); });
  EXPECT_NE(m.find("(B, H, T, D)"), std::string::npos) << m;
  m = what([&] { rope(x, -1, RopeConfig{}); });
  EXPECT_NE(m.find("-1"), std::string::npos) << m;
  m = what([&] { rope(x, randint(0, 5, {4}), RopeConfig{}); });
  EXPECT_NE(m.find("positions"), std::string::npos) << m;
  m = what([&] { rope(x, from_vector<int64_t>({0, 9000, 1}, {3}), RopeConfig{}); });
  EXPECT_NE(m.find("9000"), std::string::npos) << m;
  EXPECT_NE(m.find("8192"), std::string::npos) << m;
}
