// The fused layer_norm (Note [Fused layer norm] in autograd/ops/layer_norm.cpp) against its
// composite (layer_norm_composite, mean/square/rsqrt with autograd): outputs and the gradients of
// x, weight and bias for float32 and float64, with and without the affine parameters, one and two
// normalised dims, a non-contiguous input, large row means (the variance taken around the mean),
// autocast's bfloat16 input, anomaly mode's composite, and bit-identical gradients run to run.
// The op table (cases_conv_pool_norm.cpp) checks layer_norm against float64 loops and finite
// differences, and on CUDA against the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"

using namespace loom;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

struct Result {
  Tensor y, gx, gw, gb;
};

// layer_norm or its composite of x (requires grad) against a fixed upstream gradient.
Result ln_run(bool fused, const Tensor& x0, const Shape& ns, const Tensor& w0, const Tensor& b0,
              bool transposed = false) {
  Tensor x = x0.detach().clone().requires_grad_(true);
  Tensor w = w0.defined() ? w0.detach().clone().requires_grad_(true) : Tensor();
  Tensor b = b0.defined() ? b0.detach().clone().requires_grad_(true) : Tensor();
  Tensor xin = transposed ? x.t().contiguous().t() : x;  // the same values, column-major
  Tensor y = fused ? layer_norm(xin, ns, w, b) : layer_norm_composite(xin, ns, w, b);
  manual_seed(9);
  Tensor up = randn(y.shape(), {.dtype = y.dtype()});
  (y * up).sum().backward();
  return {y.detach(), x.grad(), w.defined() ? w.grad() : Tensor(),
          b.defined() ? b.grad() : Tensor()};
}

void expect_close(const Result& f, const Result& c, double tol) {
  EXPECT_LE(max_abs_diff(f.y, c.y), tol);
  EXPECT_LE(max_abs_diff(f.gx, c.gx), tol);
  if (c.gw.defined()) {
    EXPECT_LE(max_abs_diff(f.gw, c.gw), tol);
  }
  if (c.gb.defined()) {
    EXPECT_LE(max_abs_diff(f.gb, c.gb), tol);
  }
  EXPECT_EQ(f.gw.defined(), c.gw.defined());
  EXPECT_EQ(f.gb.defined(), c.gb.defined());
}

}  // namespace

TEST(LayerNormFused, MatchesTheComposite) {
  for (DType dt : {kF32, kF64}) {
    double tol = dt == kF64 ? 1e-12 : 2e-5;
    manual_seed(1);
    Tensor x = randn({6, 7, 48}, {.dtype = dt}), w = randn({48}, {.dtype = dt}),
           b = randn({48}, {.dtype = dt});
    SCOPED_TRACE(dtype_name(dt));
    expect_close(ln_run(true, x, {48}, w, b), ln_run(false, x, {48}, w, b), tol);
    expect_close(ln_run(true, x, {48}, Tensor(), Tensor()),
                 ln_run(false, x, {48}, Tensor(), Tensor()), tol);
    expect_close(ln_run(true, x, {48}, w, Tensor()), ln_run(false, x, {48}, w, Tensor()), tol);
    // Two normalised dims, and a strided input.
    Tensor w2 = randn({7, 48}, {.dtype = dt}), b2 = randn({7, 48}, {.dtype = dt});
    expect_close(ln_run(true, x, {7, 48}, w2, b2), ln_run(false, x, {7, 48}, w2, b2), tol);
    Tensor x2 = randn({40, 33}, {.dtype = dt});
    Tensor w3 = randn({33}, {.dtype = dt}), b3 = randn({33}, {.dtype = dt});
    expect_close(ln_run(true, x2, {33}, w3, b3, true), ln_run(false, x2, {33}, w3, b3, true), tol);
  }
}

TEST(LayerNormFused, LargeRowMeansKeepTheVariance) {
  // Rows around 1000 with unit spread: sums of squares without the mean would lose it in float32.
  manual_seed(2);
  Tensor x = randn({64, 256}) + 1000.0;
  Result f = ln_run(true, x, {256}, Tensor(), Tensor());
  Result c = ln_run(true, x.to(kF64), {256}, Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(f.y, c.y), 2e-3);
}

TEST(LayerNormFused, BFloat16UnderAutocastGivesTheCompositesFloat32Result) {
  manual_seed(3);
  Tensor x = randn({5, 64}).to(DType::BF16), w = randn({64}), b = randn({64});
  amp::Autocast ac(DType::BF16);
  Result f = ln_run(true, x, {64}, w, b), c = ln_run(false, x, {64}, w, b);
  EXPECT_EQ(f.y.dtype(), kF32);
  EXPECT_EQ(f.gx.dtype(), DType::BF16);  // the gradient comes back in the input's dtype
  expect_close(f, c, 2e-5);
}

TEST(LayerNormFused, OneNodeAndTheCompositeInAnomalyMode) {
  Tensor x = randn({4, 8}).requires_grad_(true);
  Tensor y = layer_norm(x, {8});
  EXPECT_STREQ(y.grad_fn()->name, "layer_norm");
  autograd::DetectAnomalyGuard anomaly(true);
  Tensor z = layer_norm(x, {8});
  EXPECT_STRNE(z.grad_fn()->name, "layer_norm");  // the composite's last op
}

TEST(LayerNormFused, GradientsAreTheSameRunToRun) {
  manual_seed(4);
  Tensor x = randn({300, 96}), w = randn({96}), b = randn({96});
  Result a = ln_run(true, x, {96}, w, b), c = ln_run(true, x, {96}, w, b);
  EXPECT_EQ(a.gw.to_vector<float>(), c.gw.to_vector<float>());
  EXPECT_EQ(a.gb.to_vector<float>(), c.gb.to_vector<float>());
  EXPECT_EQ(a.gx.to_vector<float>(), c.gx.to_vector<float>());
}

// The residual stream's pattern: r feeds the layer norm and, recorded after it, another op. The
// layer norm's backward adds that op's gradient of r while it writes dx (Note [Taking the pending
// gradient]); x's gradient equals the composite's, where the engine adds the two.
TEST(LayerNormFused, AddsTheResidualStreamsOtherGradientAsItWritesDx) {
  for (DType dt : {kF32, kF64}) {
    Tensor x0 = randn({6, 16}, {.dtype = dt}), w = randn({16}, {.dtype = dt});
    Tensor up = randn({6, 16}, {.dtype = dt}), c = randn({6, 16}, {.dtype = dt});
    std::vector<double> grads[2];
    for (bool fused : {true, false}) {
      Tensor x = x0.detach().clone().requires_grad_(true);
      Tensor r = x * 1.5;
      Tensor y = fused ? layer_norm(r, {16}, w, Tensor(), 1e-5)
                       : layer_norm_composite(r, {16}, w, Tensor(), 1e-5);
      Tensor z = r * c;  // the next residual add's stand-in, recorded after the layer norm
      ((y * up).sum() + z.sum()).backward();
      grads[fused] = x.grad().to_vector<double>();
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    const double tol = dt == kF32 ? 1e-5 : 1e-12;
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_NEAR(grads[1][i], grads[0][i], tol * (1 + std::abs(grads[0][i]))) << i;
  }
}
