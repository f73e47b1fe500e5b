// add_layer_norm and layer_norm's y_dtype (Note [Layer norm with the residual add] in
// autograd/ops/layer_norm.cpp): {x + branch, layer_norm(x + branch)} against the two ops composed,
// values and the gradients of x, branch, weight and bias with both results used downstream (as in
// a transformer block), float64 and float32; under autocast a bfloat16 branch and a bfloat16 y
// (float32 statistics) against the composite on the same values; y_dtype alone is layer_norm then
// the cast, bit for bit; anomaly mode composes. (CUDA's kernels: CudaLayerNorm.ResidualAndBf16Io.)
#include <gtest/gtest.h>

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"

using namespace loom;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

struct Outputs {
  Tensor r, y, gx, gbranch, gw, gb;
};

// {r, y} by add_layer_norm (fused) or by x + branch and layer_norm_composite, then
// sum(r u1) + sum(y u2) backward.
Outputs run(bool fused, const Tensor& x0, const Tensor& br0, const Tensor& w0, const Tensor& b0,
            std::optional<DType> low) {
  Tensor x = x0.detach().clone().requires_grad_(true),
         br = br0.detach().clone().requires_grad_(true);
  Tensor w = w0.detach().clone().requires_grad_(true), b = b0.detach().clone().requires_grad_(true);
  const Shape ns{x0.size(-1)};
  Tensor r, y;
  if (fused) {
    std::tie(r, y) = add_layer_norm(x, br, ns, w, b, 1e-5, low);
  } else {
    r = x + br;
    y = layer_norm_composite(r, ns, w, b);
    if (low) y = y.to(*low);
  }
  Generator gen(4);
  Tensor u1 = randn(r.shape(), {.dtype = r.dtype()}, &gen);
  Tensor u2 = randn(y.shape(), {.dtype = kF32}, &gen).to(y.dtype());
  ((r * u1).sum() + (y * u2).sum().to(r.dtype())).backward();
  return {r.detach(), y.detach(), x.grad(), br.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST(AddLayerNorm, MatchesTheTwoOpsComposed) {
  for (DType dt : {kF64, kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    Generator gen(3);
    Tensor x = randn({2, 5, 24}, {.dtype = dt}, &gen) * 3.0 + 1.0;
    Tensor br = randn({2, 5, 24}, {.dtype = dt}, &gen), w = randn({24}, {.dtype = dt}, &gen);
    Tensor b = randn({24}, {.dtype = dt}, &gen);
    Outputs f = run(true, x, br, w, b, std::nullopt), c = run(false, x, br, w, b, std::nullopt);
    const double tol = dt == kF64 ? 1e-12 : 2e-5;
    EXPECT_EQ(max_abs_diff(f.r, c.r), 0.0) << "the same additions";
    EXPECT_LT(max_abs_diff(f.y, c.y), tol);
    for (auto [got, want] : {std::pair{f.gx, c.gx}, std::pair{f.gbranch, c.gbranch},
                             std::pair{f.gw, c.gw}, std::pair{f.gb, c.gb}})
      EXPECT_LT(max_abs_diff(got, want), tol * 10);
  }
}

TEST(AddLayerNorm, Bf16BranchAndOutputUnderAutocast) {
  Generator gen(5);
  Tensor x = randn({6, 32}, {}, &gen), br = randn({6, 32}, {}, &gen).to(kBF16);
  Tensor w = randn({32}, {}, &gen), b = randn({32}, {}, &gen);
  Outputs f, c;
  {
    amp::Autocast ac(kBF16);
    f = run(true, x, br, w, b, kBF16);
    c = run(false, x, br, w, b, kBF16);
  }
  EXPECT_EQ(f.r.dtype(), kF32);
  EXPECT_EQ(f.y.dtype(), kBF16);
  EXPECT_EQ(f.gbranch.dtype(), kBF16);
  EXPECT_EQ(max_abs_diff(f.r, c.r), 0.0);
  // y: float32 statistics either way, then one rounding to bfloat16 (2^-8 relative)
  EXPECT_LT(max(abs(f.y.to(kF64) - c.y.to(kF64)) - abs(c.y.to(kF64)) / 128).item(), 1e-6);
  EXPECT_LT(max_abs_diff(f.gx, c.gx), 1e-4 * (1 + max(abs(c.gx)).item()));
  EXPECT_LT(max_abs_diff(f.gw, c.gw), 1e-4 * (1 + max(abs(c.gw)).item()));
}

TEST(AddLayerNorm, YDtypeIsTheCastFused) {
  Generator gen(6);
  Tensor x = randn({7, 16}, {}, &gen), w = randn({16}, {}, &gen), b = randn({16}, {}, &gen);
  Tensor y = layer_norm(x, {16}, w, b, 1e-5, kBF16);
  EXPECT_EQ(y.dtype(), kBF16);
  Tensor want = layer_norm(x, {16}, w, b).to(kBF16);
  EXPECT_EQ(max_abs_diff(y, want), 0.0);
}

TEST(AddLayerNorm, AnomalyModeComposes) {
  Generator gen(7);
  Tensor x = randn({3, 8}, {}, &gen).requires_grad_(true), br = randn({3, 8}, {}, &gen);
  autograd::DetectAnomalyGuard on(true);
  auto [r, y] = add_layer_norm(x, br, {8});
  EXPECT_STREQ(r.grad_fn()->name, "add");
  EXPECT_STRNE(y.grad_fn()->name, "layer_norm") << "anomaly mode runs the composite";
}
