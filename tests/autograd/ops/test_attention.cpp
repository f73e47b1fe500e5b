// scaled_dot_product_attention beyond the op table's rows: autocast (the products in bf16, the
// softmax in float32, bit for bit the hand-written casts), dropout on the weights drawn from the
// caller's generator (values and gradient), the default scale, the causal mask's first row, and
// that the composite runs everywhere while no fused path exists.
// Leaves out: the float64 references and gradchecks (tests/autograd/cases_embedding_attention.cpp)
// and bad calls (test_attention_errors.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/gradcheck.h"
#include "autograd/ops/ops.h"

namespace loom {
namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     size_t(a.numel()) * a.element_size()) == 0;
}

Tensor leaf(const Shape& s, uint64_t seed, DType dt = kF32) {
  Generator gen(seed);
  return randn(s, {.dtype = dt}, &gen).requires_grad_(true);
}

TEST(Attention, AutocastRunsTheProductsLowAndTheSoftmaxInFloat32) {
  Tensor q = leaf({2, 3, 5, 8}, 1), k = leaf({2, 3, 7, 8}, 2), v = leaf({2, 3, 7, 4}, 3);
  for (DType low : {kBF16, kF16}) {
    SCOPED_TRACE(dtype_name(low));
    Tensor y;
    {
      amp::Autocast guard(low);
      y = scaled_dot_product_attention(q, k, v, true);
    }
    EXPECT_EQ(y.dtype(), low);
    // The same steps with the casts written out, autocast off.
    Tensor ql = to(q, low), kl = to(k, low), vl = to(v, low);
    Tensor s = matmul(ql, kl.transpose(2, 3)) * (1 / std::sqrt(8.0));
    Tensor mask = zeros({5, 7}, {.dtype = low});
    for (int64_t i = 0; i < 5; ++i) mask.slice(0, i, i + 1).slice(1, i + 1, 7).fill_(-INFINITY);
    Tensor w = softmax(to(s + mask, kF32), -1);
    Tensor want = matmul(to(w, low), vl);
    EXPECT_TRUE(bit_equal(y, want));
    // Gradients come back to the float32 inputs in float32.
    sum(to(y, kF32)).backward();
    for (Tensor t : {q, k, v}) {  // handles to the same leaves
      ASSERT_TRUE(t.grad().defined());
      EXPECT_EQ(t.grad().dtype(), kF32);
      t.set_grad(Tensor());
    }
  }
}

TEST(Attention, DropoutDrawsFromTheGivenGenerator) {
  Tensor q = leaf({2, 2, 6, 4}, 4, kF64), k = leaf({2, 2, 6, 4}, 5, kF64),
         v = leaf({2, 2, 6, 3}, 6, kF64);
  const GeneratorState before = default_generator().state();
  Generator g1(77), g2(77);
  Tensor y = scaled_dot_product_attention(q, k, v, true, kDefaultScale, 0.4, &g1);
  EXPECT_EQ(default_generator().state().offset, before.offset);  // the default one is untouched
  EXPECT_EQ(default_generator().state().seed, before.seed);
  Tensor w = softmax(
      matmul(q, k.transpose(2, 3)) * 0.5 + where(gt(arange(6).view({1, 6}), arange(6).view({6, 1})),
                                                 scalar_tensor(-INFINITY, {.dtype = kF64}),
                                                 scalar_tensor(0, {.dtype = kF64})),
      -1);
  Tensor want = matmul(dropout(w, 0.4, true, &g2), v);
  EXPECT_TRUE(bit_equal(y, want));
  EXPECT_FALSE(bit_equal(y, scaled_dot_product_attention(q, k, v, true)));  // something dropped
  // With the generator reset on every call the op is a fixed function: gradcheck it.
  auto f = [](const std::vector<Tensor>& x) {
    Generator g(9);
    return scaled_dot_product_attention(x[0], x[1], x[2], false, 0.7, 0.3, &g);
  };
  auto r = autograd::gradcheck(f, {q, k, v});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Attention, DefaultScaleIsOneOverSqrtHeadSize) {
  Tensor q = leaf({3, 4, 9}, 7, kF64), k = leaf({3, 5, 9}, 8, kF64), v = leaf({3, 5, 2}, 9, kF64);
  Tensor y = scaled_dot_product_attention(q, k, v);
  EXPECT_TRUE(bit_equal(y, scaled_dot_product_attention(q, k, v, false, 1.0 / 3.0)));
  EXPECT_FALSE(bit_equal(y, scaled_dot_product_attention(q, k, v, false, 1.0)));
}

TEST(Attention, CausalFirstQuerySeesOnlyTheFirstKey) {
  Tensor q = leaf({2, 3, 5, 4}, 10, kF64), k = leaf({2, 3, 8, 4}, 11, kF64),
         v = leaf({2, 3, 8, 6}, 12, kF64);
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  EXPECT_TRUE(bit_equal(y.select(2, 0), v.select(2, 0)));  // weight exactly 1 on key 0
}

TEST(Attention, TheFusedPathIsCudasSoTheCpuRunsTheComposite) {
  Tensor q = leaf({1, 2, 5, 8}, 13, kBF16), k = leaf({1, 2, 5, 8}, 14, kBF16),
         v = leaf({1, 2, 5, 8}, 15, kBF16);
  EXPECT_FALSE(sdpa_fused_applies(q, k, v, true, 0.0));  // CPU tensors (tests/autograd/ops/
                                                         // test_cuda_attention.cpp: CUDA's)
  EXPECT_TRUE(bit_equal(scaled_dot_product_attention(q, k, v, true),
                        scaled_dot_product_attention_composite(q, k, v, true)));
}

}  // namespace
// The causal mask is finite (the dtype's most negative value), so anomaly mode, which stops at any
// inf an op reads, runs a causal attention and its backward; the result is the same.
TEST(Attention, CausalRunsInAnomalyModeWithTheSameResult) {
  for (DType dt : {kF32, kBF16}) {
    Tensor q = leaf({1, 2, 6, 8}, 16, dt), k = leaf({1, 2, 6, 8}, 17, dt),
           v = leaf({1, 2, 6, 8}, 18, dt);
    Tensor plain = scaled_dot_product_attention(q, k, v, true);
    autograd::DetectAnomalyGuard anomaly(true);
    Tensor checked = scaled_dot_product_attention(q, k, v, true);
    checked.sum().backward();
    EXPECT_TRUE(bit_equal(plain, checked));
    EXPECT_TRUE(q.grad().defined());
  }
}

}  // namespace loom
