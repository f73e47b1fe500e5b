// fp8_linear on the CPU (the emulated recipe of Note [FP8 linear] in autograd/ops/fp8_linear.cpp):
// forward against the float64 product of the inputs quantised by the reference encoder, backward
// against the float64 formulas of the recipe (e5m2 gradient times e4m3 weight or input; the bias
// gradient unquantised): a quantised op has no useful finite differences. Also the dtypes under
// bf16 autocast, the fallback to linear for rows that are not a multiple of 16, and the errors.
#include <gtest/gtest.h>

#include "autograd/amp/autocast.h"
#include "autograd/ops/fp8_linear.h"
#include "autograd/ops/ops.h"
#include "support/errors.h"
#include "support/fp8_reference.h"

using namespace loom;

namespace {

constexpr Fp8Format E4M3 = Fp8Format::E4M3, E5M2 = Fp8Format::E5M2;

Tensor dq(const Tensor& t, Fp8Format f) { return test::fp8_reference(t, f).dequantized; }

struct Inputs {
  Tensor x, w, b, g;  // x (M, K), w (N, K), b (N) leaves; g (M, N) the upstream gradient
};

Inputs make_inputs(int64_t M, int64_t K, int64_t N, uint64_t seed) {
  Generator gen(seed);
  Inputs in{randn({M, K}, {}, &gen), randn({N, K}, {}, &gen) * 0.1, randn({N}, {}, &gen),
            randn({M, N}, {}, &gen) * 1e-3};
  for (Tensor* t : {&in.x, &in.w, &in.b}) t->requires_grad_(true);
  return in;
}

}  // namespace

TEST(Fp8Linear, ForwardIsTheFloat64ProductOfTheQuantisedInputs) {
  Inputs in = make_inputs(32, 48, 64, 1);
  Tensor y = fp8_linear(in.x, in.w, in.b);
  ASSERT_EQ(y.shape(), (Shape{32, 64}));
  ASSERT_EQ(y.dtype(), kF32);
  Tensor want = mm(dq(in.x, E4M3), dq(in.w, E4M3).t()) + in.b.detach().to(kF64);
  EXPECT_LT(test::max_abs_diff(y, want), 1e-5 * test::max_abs(want));
  // FP8 rounding is visible: the unquantised product differs by far more than that.
  Tensor exact = mm(in.x.detach().to(kF64), in.w.detach().to(kF64).t()) + in.b.detach().to(kF64);
  EXPECT_GT(test::max_abs_diff(y, exact), 1e-3 * test::max_abs(want));
}

TEST(Fp8Linear, BackwardIsTheRecipesFloat64Formula) {
  Inputs in = make_inputs(32, 48, 64, 2);
  (fp8_linear(in.x, in.w, in.b) * in.g).sum().backward();
  const Tensor g8 = dq(in.g, E5M2);
  Tensor dx = mm(g8, dq(in.w, E4M3));      // (M, N) @ (N, K)
  Tensor dw = mm(g8.t(), dq(in.x, E4M3));  // (N, M) @ (M, K)
  Tensor db = in.g.to(kF64).sum({0});
  ASSERT_TRUE(in.x.grad().defined() && in.w.grad().defined() && in.b.grad().defined());
  EXPECT_LT(test::max_abs_diff(in.x.grad(), dx), 1e-5 * test::max_abs(dx));
  EXPECT_LT(test::max_abs_diff(in.w.grad(), dw), 1e-5 * test::max_abs(dw));
  EXPECT_LT(test::max_abs_diff(in.b.grad(), db), 1e-5 * test::max_abs(db));
}

TEST(Fp8Linear, KeepsLeadingDimsAndSkipsUnwantedGradients) {
  Inputs in = make_inputs(32, 16, 32, 3);
  Tensor x3 = in.x.detach().reshape({2, 16, 16});
  Tensor y = fp8_linear(x3, in.w, Tensor());  // x does not require grad
  ASSERT_EQ(y.shape(), (Shape{2, 16, 32}));
  EXPECT_LT(test::max_abs_diff(y.reshape({32, 32}), fp8_linear(in.x.detach(), in.w.detach())),
            1e-12);
  y.sum().backward();
  EXPECT_TRUE(in.w.grad().defined());
  EXPECT_EQ(in.w.grad().shape(), (Shape{32, 16}));
}

TEST(Fp8Linear, UnderBf16AutocastWritesBf16AndFloat32WeightGradients) {
  Inputs in = make_inputs(16, 32, 16, 4);
  Tensor xb = in.x.detach().to(kBF16);
  xb.requires_grad_(true);
  Tensor y;
  {
    amp::Autocast autocast(kBF16);
    y = fp8_linear(xb, in.w, in.b);
  }
  ASSERT_EQ(y.dtype(), kBF16);
  Tensor want = mm(dq(xb, E4M3), dq(in.w, E4M3).t()) + in.b.detach().to(kBF16).to(kF64);
  EXPECT_LT(test::max_abs_diff(y, want), 1e-2 * test::max_abs(want));
  (y.to(kF32) * in.g).sum().backward();
  EXPECT_EQ(xb.grad().dtype(), kBF16);
  EXPECT_EQ(in.w.grad().dtype(), kF32);
  EXPECT_EQ(in.b.grad().dtype(), kF32);
}

TEST(Fp8Linear, RowsNotAMultipleOf16RunLinear) {
  EXPECT_FALSE(fp8_linear_applies(10, 32, 16));
  EXPECT_FALSE(fp8_linear_applies(16, 24, 16));
  EXPECT_TRUE(fp8_linear_applies(16, 32, 48));
  Inputs in = make_inputs(10, 32, 16, 5);
  EXPECT_EQ(test::max_abs_diff(fp8_linear(in.x, in.w, in.b), linear(in.x, in.w, in.b)), 0.0);
}

TEST(Fp8Linear, ErrorsNameTheOpAndTheTensors) {
  Inputs in = make_inputs(16, 32, 16, 6);
  test::expect_error([&] { fp8_linear(in.x.to(kF16), in.w); }, {"fp8_linear: input"});
  test::expect_error([&] { fp8_linear(in.x, randn({16, 24})); }, {"expects 24"});
  test::expect_error([&] { fp8_linear(in.x, in.w, randn({8})); }, {"fp8_linear: bias"});
  test::expect_error([&] { fp8_linear(in.x.to(kF64), in.w); }, {"float32 or bfloat16"});
}
