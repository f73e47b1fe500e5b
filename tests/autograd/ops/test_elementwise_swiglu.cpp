// swiglu (Note [SwiGLU] in autograd/ops/elementwise.cpp) against its composite silu(gate) * up:
// values and gradients in float32, float64 and bfloat16, on separate tensors and on the halves of
// one packed projection; its recompute recipe (Note [Recomputed activations] in
// autograd/recompute.h): under the switch the down projection keeps the recipe, the product's
// storage is freed with the forward, and the gradients are the same bit for bit; errors. The
// forward against float64 and the gradients against finite differences are the op table's rows
// (tests/autograd/cases_llama.cpp); CUDA's kernels:
// tests/kernels/cuda/elementwise/test_cuda_swiglu.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "autograd/ops/ops.h"
#include "autograd/recompute.h"

using namespace loom;

namespace {

double max_abs(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

// Largest |a - b| / max(1, |b|).
double max_rel(const Tensor& a, const Tensor& b) {
  Tensor d = abs(a.to(kF64) - b.to(kF64)), s = maximum(abs(b.to(kF64)), ones_like(d));
  return max(d / s).item();
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

TEST(Swiglu, FusedMatchesTheCompositeValuesAndGradients) {
  for (DType d : {kF32, kF64, kBF16}) {
    SCOPED_TRACE(dtype_name(d));
    manual_seed(1);
    Tensor packed = (randn({3, 5, 16}) * 2.0).to(d), g = randn({3, 5, 8}).to(d);
    auto run = [&](bool fused) {
      Tensor p = packed.detach().requires_grad_(true);
      Tensor gate = p.slice(2, 0, 8), up = p.slice(2, 8, 16);  // halves of one projection
      Tensor y = fused ? swiglu(gate, up) : swiglu_composite(gate, up);
      (y * g).sum().backward();
      return std::make_pair(y.detach(), p.grad());
    };
    auto [yf, gf] = run(true);
    auto [yc, gc] = run(false);
    // bfloat16: the composite rounds silu(gate) and then the product, the fused op once.
    const double tol = d == kF64 ? 1e-14 : d == kF32 ? 1e-6 : 2e-2;
    EXPECT_EQ(yf.dtype(), d);
    EXPECT_LE(max_rel(yf, yc), tol);
    EXPECT_LE(max_rel(gf, gc), tol);
  }
}

// down(swiglu(gate, up)) saves the product for its weight gradient: with the switch on it keeps
// the recipe instead, the product's storage goes with the forward, and nothing else changes.
TEST(Swiglu, TheDownProjectionKeepsItsRecipeAndGetsTheSameGradients) {
  manual_seed(2);
  Tensor g0 = randn({16, 12}), u0 = randn({16, 12}), w0 = randn({12, 5});
  auto grads = [&](bool recompute, std::weak_ptr<Storage>* product) {
    autograd::RecomputeActivationsGuard guard(recompute);
    Tensor gate = g0.clone().requires_grad_(true), up = u0.clone().requires_grad_(true);
    Tensor w = w0.clone().requires_grad_(true);
    Tensor loss;
    {
      Tensor y = swiglu(gate, up);
      EXPECT_EQ(bool(y.storage()->recompute), recompute);
      if (product) *product = y.storage();
      loss = matmul(y, w).sum();
    }
    if (product) {
      EXPECT_TRUE(product->expired()) << "the product outlived the forward";
    }
    loss.backward();
    return std::vector<Tensor>{gate.grad(), up.grad(), w.grad()};
  };
  std::weak_ptr<Storage> product;
  auto plain = grads(false, nullptr), recomputed = grads(true, &product);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(max_abs(plain[i], recomputed[i]), 0.0) << i;
}

TEST(Swiglu, ErrorsNameTheOpShapesAndDtypes) {
  std::string m = what([] { swiglu(randn({2, 3}), randn({2, 4})); });
  EXPECT_NE(m.find("swiglu"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
  m = what([] { swiglu(randint(0, 3, {2, 3}), randint(0, 3, {2, 3})); });
  EXPECT_NE(m.find("swiglu"), std::string::npos) << m;
  EXPECT_NE(m.find("int64"), std::string::npos) << m;
  m = what([] { swiglu(randn({2, 3}), randn({2, 3}, {.dtype = kF64})); });
  EXPECT_NE(m.find("float64"), std::string::npos) << m;
}
