// Dropout is random, so it is tested by its properties rather than in the op table: the kept
// fraction, the 1/(1-p) scale, reproducibility from the generator state, the exact Philox draw
// the CUDA kernel must reproduce, eval/p=0 identity, p=1 zeros, the gradient and bad p.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/gradcheck.h"
#include "autograd/ops/ops.h"
#include "core/philox.h"
#include "support/errors.h"

using loom::test::error_of;

namespace loom {
namespace {

class DropoutStats : public ::testing::TestWithParam<double> {};

TEST_P(DropoutStats, KeptFractionAndScale) {
  const double p = GetParam();
  const int64_t n = 100000;
  manual_seed(1234);
  Tensor y = dropout(ones({n}), p, true);
  ASSERT_EQ(y.shape(), Shape{n});
  ASSERT_EQ(y.dtype(), kF32);
  const float scale = float(1.0 / (1.0 - p));
  int64_t kept = 0;
  for (float v : y.to_vector<float>()) {
    if (v != 0.0f) {
      ++kept;
      ASSERT_EQ(v, scale);  // kept elements are scaled by exactly 1/(1-p), rounded to float
    }
  }
  // The kept count is Binomial(n, 1-p): allow 6 standard deviations.
  double frac = double(kept) / double(n), sd = std::sqrt(p * (1 - p) / double(n));
  EXPECT_NEAR(frac, 1.0 - p, 6 * sd) << "p = " << p;
  // The mean of y estimates E[x] = 1.
  EXPECT_NEAR(y.mean().item(), 1.0, 6 * sd / (1 - p));
}

INSTANTIATE_TEST_SUITE_P(Dropout, DropoutStats, ::testing::Values(0.1, 0.3, 0.5, 0.9));

TEST(Dropout, AGivenGeneratorIsUsedAndTheDefaultOneLeftAlone) {
  Tensor x = randn({64, 33});
  manual_seed(42);
  auto from_default = dropout(x, 0.5, true).to_vector<float>();
  manual_seed(7);
  const GeneratorState before = default_generator().state();
  Generator gen(42);
  auto from_gen = dropout(x, 0.5, true, &gen).to_vector<float>();
  EXPECT_EQ(from_gen, from_default);  // the same seed and offset: the same mask
  EXPECT_EQ(gen.state().offset, uint64_t(x.numel()));
  EXPECT_EQ(default_generator().state().seed, before.seed);
  EXPECT_EQ(default_generator().state().offset, before.offset);
}

TEST(Dropout, SameSeedSameMaskNextCallDiffers) {
  Tensor x = randn({64, 33});
  manual_seed(42);
  auto a = dropout(x, 0.5, true).to_vector<float>();
  auto b = dropout(x, 0.5, true).to_vector<float>();  // the generator moved on
  manual_seed(42);
  auto c = dropout(x, 0.5, true).to_vector<float>();
  EXPECT_EQ(a, c);
  EXPECT_NE(a, b);
}

// The mask is the documented Philox draw: kept iff philox_uniform(seed, offset, i, f64) >= p,
// i.e. (rand(shape) >= p) for the same generator state. The CUDA kernel must match this.
TEST(Dropout, MaskIsThePhiloxUniformDraw) {
  const double p = 0.4;
  for (DType dt : {kF32, kF64}) {
    Tensor x = ones({3, 1000}, {.dtype = dt});
    manual_seed(7);
    dropout(x, 0.5, true);  // move the offset away from 0
    GeneratorState s = default_generator().state();
    auto y = dropout(x, p, true).to_vector<double>();
    default_generator().set_state(s);
    auto r = rand({3, 1000}, {.dtype = dt}).to_vector<double>();
    for (size_t i = 0; i < y.size(); ++i) {
      bool keep = philox_uniform(s.seed, s.offset, i, dt == kF64) >= p;
      ASSERT_EQ(y[i] != 0.0, keep) << dtype_name(dt) << " element " << i;
      ASSERT_EQ(keep, r[i] >= p) << dtype_name(dt) << " element " << i;
    }
    EXPECT_EQ(default_generator().state().offset, s.offset + 3000) << "one counter per element";
  }
}

// Half types draw the same 24-bit uniforms as float32, so their keep pattern is identical.
TEST(Dropout, HalfTypesMatchFloat32Pattern) {
  Tensor x = randn({500});
  manual_seed(3);
  auto y32 = dropout(x, 0.3, true).to_vector<float>();
  for (DType dt : {kF16, kBF16}) {
    manual_seed(3);
    Tensor y = dropout(x.to(dt), 0.3, true);
    ASSERT_EQ(y.dtype(), dt);
    auto yh = y.to_vector<float>();
    for (size_t i = 0; i < yh.size(); ++i)
      ASSERT_EQ(yh[i] != 0.0f, y32[i] != 0.0f) << dtype_name(dt) << " " << i;
  }
}

// A transposed input is masked in the row-major order of its logical shape.
TEST(Dropout, NonContiguousInput) {
  Tensor base = randn({50, 40}, {.dtype = kF64});
  Tensor x = base.t();  // (40, 50), not contiguous
  manual_seed(11);
  auto r = rand({40, 50}, {.dtype = kF64}).to_vector<double>();
  manual_seed(11);
  Tensor y = dropout(x, 0.5, true);
  ASSERT_EQ(y.shape(), (Shape{40, 50}));
  auto yv = y.to_vector<double>(), xv = x.to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(yv[i], r[i] >= 0.5 ? xv[i] * 2.0 : 0.0) << i;
}

TEST(Dropout, EvalAndZeroPAreIdentity) {
  Tensor x = randn({4, 5});
  x.requires_grad_(true);
  GeneratorState before = default_generator().state();
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_EQ(default_generator().state().offset, before.offset) << "no counters used";
}

TEST(Dropout, POneGivesZerosAndZeroGradient) {
  Tensor x = randn({6, 7}, {.dtype = kF64});
  x.requires_grad_(true);
  Tensor y = dropout(x, 1.0, true);
  for (double v : y.to_vector<double>()) ASSERT_EQ(v, 0.0);
  y.sum().backward();
  for (double v : x.grad().to_vector<double>()) ASSERT_EQ(v, 0.0);
}

TEST(Dropout, GradientIsMaskTimesGrad) {
  const double p = 0.4;
  Tensor x = randn({30, 20}, {.dtype = kF64});
  x.requires_grad_(true);
  Tensor g = randn({30, 20}, {.dtype = kF64});
  Tensor y = dropout(x, p, true);
  (y * g).sum().backward();
  auto yv = y.to_vector<double>(), gv = g.to_vector<double>(), dx = x.grad().to_vector<double>();
  int64_t kept = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    double mask = yv[i] != 0.0 ? 1.0 / (1.0 - p) : 0.0;
    kept += yv[i] != 0.0;
    ASSERT_DOUBLE_EQ(dx[i], gv[i] * mask) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, int64_t(yv.size()));
}

// With the generator reset before each call the mask is fixed, so finite differences apply.
TEST(Dropout, GradcheckWithFixedMask) {
  GeneratorState s{99, 12345};
  Tensor x = randn({5, 6}, {.dtype = kF64});
  x.requires_grad_(true);
  auto r = autograd::gradcheck(
      [s](const std::vector<Tensor>& xs) {
        default_generator().set_state(s);
        return dropout(xs[0].t(), 0.3, true);
      },
      {x});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Dropout, BadArguments) {
  Tensor x = randn({3});
  for (double p : {-0.1, 1.5}) {
    std::string msg = error_of([&] { dropout(x, p, true); });
    EXPECT_NE(msg.find("dropout"), std::string::npos) << msg;
    EXPECT_NE(msg.find(p < 0 ? "-0.1" : "1.5"), std::string::npos) << msg;
    EXPECT_NE(error_of([&] { dropout(x, p, false); }).find("dropout"), std::string::npos)
        << "checked in eval too";
  }
  std::string msg = error_of([&] { dropout(arange(5), 0.5, true); });
  EXPECT_NE(msg.find("dropout"), std::string::npos) << msg;
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
}

}  // namespace
}  // namespace loom
