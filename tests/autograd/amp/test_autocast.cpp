// amp::Autocast: the policy table (the dtype each op class computes in under bf16 and f16, and
// the dtype of the gradients of float32 leaves), nesting and disabling, the cast cache, and the
// backward pass running without autocast.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"

using namespace loom;

namespace {

Tensor leaf(const Shape& s, uint64_t seed) {
  manual_seed(seed);
  return randn(s, {.requires_grad = true});
}

// One row of the policy table: run `f` on float32 leaves inside a scope of `low`; the result must
// be `expect` (Lower: low itself) and every leaf's gradient float32.
enum class Expect { Lower, F32 };
struct PolicyRow {
  const char* op;
  Expect expect;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  std::vector<Shape> shapes;
};

std::vector<PolicyRow> policy_rows() {
  Tensor target = from_vector<int64_t>({1, 0, 2, 1}, {4});
  return {
      {"mm", Expect::Lower, [](auto& a) { return mm(a[0], a[1]); }, {{4, 3}, {3, 5}}},
      {"bmm", Expect::Lower, [](auto& a) { return bmm(a[0], a[1]); }, {{2, 4, 3}, {2, 3, 5}}},
      {"matmul", Expect::Lower, [](auto& a) { return matmul(a[0], a[1]); }, {{2, 4, 3}, {3, 5}}},
      {"linear",
       Expect::Lower,
       [](auto& a) { return linear(a[0], a[1], a[2]); },
       {{4, 3}, {5, 3}, {5}}},
      {"conv2d",
       Expect::Lower,
       [](auto& a) { return conv2d(a[0], a[1], a[2]); },
       {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}},
      {"softmax",
       Expect::F32,
       [](auto& a) { return softmax(mm(a[0], a[1]), 1); },
       {{4, 3}, {3, 3}}},
      {"log_softmax",
       Expect::F32,
       [](auto& a) { return log_softmax(mm(a[0], a[1]), 1); },
       {{4, 3}, {3, 3}}},
      {"cross_entropy",
       Expect::F32,
       [target](auto& a) { return cross_entropy(mm(a[0], a[1]), target); },
       {{4, 3}, {3, 3}}},
      {"nll_loss",
       Expect::F32,
       [target](auto& a) { return nll_loss(mm(a[0], a[1]), target); },
       {{4, 3}, {3, 3}}},
      {"mse_loss",
       Expect::F32,
       [](auto& a) { return mse_loss(mm(a[0], a[1]), a[2]); },
       {{4, 3}, {3, 3}, {4, 3}}},
      {"layer_norm",
       Expect::F32,
       [](auto& a) { return layer_norm(mm(a[0], a[1]), {3}, a[2], a[3]); },
       {{4, 3}, {3, 3}, {3}, {3}}},
      {"batch_norm (low-precision input: stays low, float32 statistics inside)",
       Expect::Lower,
       [](auto& a) { return batch_norm(mm(a[0], a[1]), a[2], a[3], Tensor(), Tensor(), true); },
       {{4, 3}, {3, 3}, {3}, {3}}},
      {"batch_norm (float32 input)",
       Expect::F32,
       [](auto& a) { return batch_norm(a[0] * 2.0, a[1], a[2], Tensor(), Tensor(), true); },
       {{4, 3}, {3}, {3}}},
      {"sum", Expect::F32, [](auto& a) { return sum(mm(a[0], a[1])); }, {{4, 3}, {3, 3}}},
      {"mean", Expect::F32, [](auto& a) { return mean(mm(a[0], a[1])); }, {{4, 3}, {3, 3}}},
      {"exp", Expect::F32, [](auto& a) { return exp(mm(a[0], a[1])); }, {{4, 3}, {3, 3}}},
      {"log",
       Expect::F32,
       [](auto& a) { return log(abs(mm(a[0], a[1])) + 1.0); },
       {{4, 3}, {3, 3}}},
      {"pow", Expect::F32, [](auto& a) { return pow(mm(a[0], a[1]), 2.0); }, {{4, 3}, {3, 3}}},
      // Promotion: a low-precision product plus a float32 tensor is float32.
      {"add (promote)",
       Expect::F32,
       [](auto& a) { return mm(a[0], a[1]) + a[2]; },
       {{4, 3}, {3, 3}, {4, 3}}},
      {"mul (promote)",
       Expect::F32,
       [](auto& a) { return a[2] * mm(a[0], a[1]); },
       {{4, 3}, {3, 3}, {4, 3}}},
      // Everything else keeps its input's dtype.
      {"relu", Expect::Lower, [](auto& a) { return relu(mm(a[0], a[1])); }, {{4, 3}, {3, 3}}},
      {"max_pool2d",
       Expect::Lower,
       [](auto& a) { return max_pool2d(conv2d(a[0], a[1]), Pool2dParams{}); },
       {{1, 2, 4, 4}, {2, 2, 1, 1}}},
  };
}

}  // namespace

TEST(Autocast, PolicyTableComputeAndGradientDtypes) {
  for (DType low : {kBF16, kF16}) {
    for (const PolicyRow& row : policy_rows()) {
      SCOPED_TRACE(std::string(row.op) + " under " + dtype_name(low));
      std::vector<Tensor> in;
      for (size_t i = 0; i < row.shapes.size(); ++i) in.push_back(leaf(row.shapes[i], 10 + i));
      Tensor y;
      {
        amp::Autocast guard(low);
        y = row.f(in);
      }
      EXPECT_EQ(y.dtype(), row.expect == Expect::Lower ? low : kF32);
      sum(to(y, kF32)).backward();
      for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_TRUE(in[i].grad().defined()) << "input " << i;
        EXPECT_EQ(in[i].grad().dtype(), kF32) << "input " << i;
      }
    }
  }
}

TEST(Autocast, OffOutsideTheScopeAndWhenDisabledInside) {
  Tensor a = randn({4, 3}), b = randn({3, 2});
  EXPECT_FALSE(amp::is_autocast_enabled());
  EXPECT_EQ(mm(a, b).dtype(), kF32);
  {
    amp::Autocast bf16(kBF16);
    EXPECT_EQ(mm(a, b).dtype(), kBF16);
    {
      amp::Autocast off(std::nullopt);
      EXPECT_FALSE(amp::is_autocast_enabled());
      EXPECT_EQ(mm(a, b).dtype(), kF32);
      {
        amp::Autocast f16(kF16);
        EXPECT_EQ(mm(a, b).dtype(), kF16);
      }
      EXPECT_EQ(mm(a, b).dtype(), kF32);
    }
    EXPECT_EQ(amp::autocast_dtype(), std::optional<DType>(kBF16));
    EXPECT_EQ(mm(a, b).dtype(), kBF16);
  }
  EXPECT_FALSE(amp::is_autocast_enabled());
  EXPECT_EQ(mm(a, b).dtype(), kF32);
  // Outside a scope, mixed dtypes stay an error (loom does not promote silently).
  EXPECT_THROW(add(a, to(a, kBF16)), Error);
  EXPECT_THROW(amp::Autocast guard(kF64), Error);
}

TEST(Autocast, MixedLowTypesPromoteToFloat32) {
  amp::Autocast guard(kBF16);
  Tensor h = to(randn({3}), kF16), b = to(randn({3}), kBF16);
  EXPECT_EQ((h + b).dtype(), kF32);
  EXPECT_EQ((b * b).dtype(), kBF16);
  EXPECT_EQ(where(gt(b, 0.0), h, b).dtype(), kF32);
}

TEST(Autocast, ResultsMatchFloat32WithinLowPrecision) {
  Tensor a = randn({16, 32}), b = randn({32, 8});
  Tensor ref = mm(a, b);
  for (DType low : {kBF16, kF16}) {
    Tensor y;
    {
      amp::Autocast guard(low);
      y = mm(a, b);
    }
    std::vector<float> r = ref.to_vector<float>(), v = to(y, kF32).to_vector<float>();
    const double tol = low == kBF16 ? 0.15 : 0.02;  // |sum| of 32 products of N(0,1) terms
    for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(v[i], r[i], tol) << dtype_name(low);
  }
}

TEST(Autocast, AWeightUsedTwiceInAScopeIsCastOnce) {
  Tensor w = leaf({8, 8}, 1);
  Tensor x = randn({4, 8});  // not a parameter: cast at each use
  int64_t c0 = amp::autocast_cast_count();
  Tensor y;
  {
    amp::Autocast guard(kBF16);
    y = linear(relu(linear(x, w)), w);  // w twice: one cast of w, one of x
    EXPECT_EQ(amp::autocast_cast_count() - c0, 2);
    linear(x, w);  // w again (cached), x again (not a leaf that requires grad)
    EXPECT_EQ(amp::autocast_cast_count() - c0, 3);
  }
  // Both uses send their gradient through the one cast back to the float32 weight.
  sum(to(y, kF32)).backward();
  ASSERT_EQ(w.grad().dtype(), kF32);
  Tensor g_amp = w.grad().clone();
  w.set_grad(Tensor());
  Tensor yr = linear(relu(linear(x, w)), w);
  sum(yr).backward();
  std::vector<float> ga = g_amp.to_vector<float>(), gr = w.grad().to_vector<float>();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(ga[i], gr[i], 0.05 * (1.0 + std::abs(gr[i])));
  // A new scope casts again (the cache ends with the outermost scope).
  int64_t c1 = amp::autocast_cast_count();
  {
    amp::Autocast guard(kBF16);
    linear(x, w);
  }
  EXPECT_EQ(amp::autocast_cast_count() - c1, 2);
}

TEST(Autocast, AnInPlaceUpdateInvalidatesTheCachedCast) {
  Tensor w = leaf({2, 2}, 3);
  amp::Autocast guard(kBF16);
  Tensor x = ones({1, 2});
  Tensor y1 = linear(x, w);
  {
    NoGradGuard no_grad;
    w.fill_(1.0);
  }
  Tensor y2 = linear(x, w);
  EXPECT_EQ(to(y2, kF32).to_vector<float>(), (std::vector<float>{2.0f, 2.0f}));
}

TEST(Autocast, BackwardInsideTheScopeRunsWithoutAutocast) {
  Tensor w = leaf({3, 3}, 4), x = leaf({2, 3}, 5);
  amp::Autocast guard(kF16);
  Tensor loss = mse_loss(linear(x, w), zeros({2, 3}));
  EXPECT_EQ(loss.dtype(), kF32);
  loss.backward();
  EXPECT_EQ(w.grad().dtype(), kF32);
  EXPECT_EQ(x.grad().dtype(), kF32);
  EXPECT_TRUE(amp::is_autocast_enabled());
}

// Note [Float32 weight gradients]: under autocast a Linear's float32 weight gets its gradient
// from the GEMM in float32, not rounded to bfloat16 and cast back. Reference: the float64 product
// of the values the GEMM read (x and the incoming gradient, both in bfloat16). A bfloat16 rounding
// of the gradient would be off by up to 2^-9 of it; this one is within float32 rounding.
TEST(Autocast, ALinearsFloat32WeightGetsAGradientNotRoundedTo16Bits) {
  Tensor w = leaf({6, 64}, 7), b = leaf({6}, 8);
  Tensor x = randn({96, 64}), g = randn({96, 6});
  {
    amp::Autocast guard(kBF16);
    sum(to(linear(x, w, b), kF32) * g).backward();
  }
  ASSERT_EQ(w.grad().dtype(), kF32);
  Tensor want = mm(to(to(g, kBF16), kF64).t(), to(to(x, kBF16), kF64));  // (6, 64)
  const double scale = max(abs(want)).item();
  EXPECT_LT(max(abs(to(w.grad(), kF64) - want)).item(), 1e-6 * scale);
  // The check can tell: bfloat16 rounding of the same values is far off.
  EXPECT_GT(max(abs(to(to(want, kBF16), kF64) - want)).item(), 1e-4 * scale);
  EXPECT_EQ(b.grad().dtype(), kF32);
}
