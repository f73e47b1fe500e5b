// Grouped-query attention in scaled_dot_product_attention (Note [Grouped-query attention] in
// autograd/ops/attention.cpp): the op on k and v with Hkv heads equals the op on k and v with each
// head repeated H / Hkv times, and the gradient of a shared head is the sum over its group; the
// CPU backend's twin (sdpa_forward and sdpa_backward, which read the shared heads in place) against
// the composite; a decode step with (B, Hkv, L, D) cached keys equals the last row of the whole
// causal attention; errors name both head counts. The op table rows (cases_llama.cpp) check the
// forward against float64 loops and the gradients against finite differences.
#include <gtest/gtest.h>

#include <string>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"

using namespace loom;

namespace {

double max_abs(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

// (B, Hkv, T, D) -> (B, Hkv * n, T, D), each head n times in a row, by explicit copies.
Tensor repeat_heads(const Tensor& x, int64_t n) {
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < x.size(1); ++h)
    for (int64_t i = 0; i < n; ++i) heads.push_back(x.slice(1, h, h + 1));
  return cat(heads, 1);
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

TEST(AttentionGqa, EqualsRepeatedHeadsAndSumsTheGroupsGradients) {
  manual_seed(1);
  const Options f64{.dtype = kF64};
  Tensor q0 = randn({2, 6, 5, 4}, f64), k0 = randn({2, 2, 5, 4}, f64),
         v0 = randn({2, 2, 5, 3}, f64);
  Tensor g = randn({2, 6, 5, 3}, f64);
  for (bool causal : {false, true}) {
    Tensor q = q0.detach().requires_grad_(true), k = k0.detach().requires_grad_(true),
           v = v0.detach().requires_grad_(true);
    Tensor y = scaled_dot_product_attention(q, k, v, causal);
    (y * g).sum().backward();
    Tensor q2 = q0.detach().requires_grad_(true), k2 = k0.detach().requires_grad_(true),
           v2 = v0.detach().requires_grad_(true);
    Tensor y2 = scaled_dot_product_attention(q2, repeat_heads(k2, 3), repeat_heads(v2, 3), causal);
    (y2 * g).sum().backward();
    EXPECT_LE(max_abs(y, y2), 1e-13) << "causal " << causal;
    EXPECT_LE(max_abs(q.grad(), q2.grad()), 1e-13);
    EXPECT_LE(max_abs(k.grad(), k2.grad()), 1e-13);
    EXPECT_LE(max_abs(v.grad(), v2.grad()), 1e-13);
  }
}

// The CPU backend's methods are the twin of CUDA's fused path: they read key/value head
// h / (H / Hkv) in place and add the group's gradients.
TEST(AttentionGqa, CpuTwinMatchesTheComposite) {
  manual_seed(2);
  const Options f64{.dtype = kF64};
  Tensor q = randn({1, 4, 6, 8}, f64).requires_grad_(true), k = randn({1, 1, 6, 8}, f64),
         v = randn({1, 1, 6, 8}, f64), g = randn({1, 4, 6, 8}, f64);
  k.requires_grad_(true), v.requires_grad_(true);
  const double scale = 1.0 / std::sqrt(8.0);
  Backend& be = backend_for(kCPU);
  auto [out, stats] = be.sdpa_forward(q.detach(), k.detach(), v.detach(), true, scale);
  SdpaGrads d = be.sdpa_backward(g, q.detach(), k.detach(), v.detach(), out, stats, true, scale);
  Tensor y = scaled_dot_product_attention_composite(q, k, v, true);
  (y * g).sum().backward();
  EXPECT_LE(max_abs(out, y), 1e-13);
  EXPECT_EQ(d.dk.shape(), k.shape());
  EXPECT_LE(max_abs(d.dq, q.grad()), 1e-12);
  EXPECT_LE(max_abs(d.dk, k.grad()), 1e-12);
  EXPECT_LE(max_abs(d.dv, v.grad()), 1e-12);
}

// One new query row (B, H, 1, D) against L cached keys and values (B, Hkv, L, D), no mask: the
// last row of causal attention over the whole sequence.
TEST(AttentionGqa, ADecodeStepAgainstTheCachedGroupedHeadsIsTheLastRow) {
  manual_seed(3);
  Tensor q = randn({2, 8, 7, 16}), k = randn({2, 2, 7, 16}), v = randn({2, 2, 7, 16});
  Tensor whole = scaled_dot_product_attention(q, k, v, true);
  Tensor step = scaled_dot_product_attention(q.slice(2, 6, 7), k, v, false);
  EXPECT_LE(max_abs(step, whole.slice(2, 6, 7)), 1e-5);
}

TEST(AttentionGqa, ErrorsNameBothHeadCounts) {
  std::string m = what([] {
    scaled_dot_product_attention(randn({1, 4, 3, 8}), randn({1, 3, 3, 8}), randn({1, 3, 3, 8}));
  });
  EXPECT_NE(m.find("scaled_dot_product_attention"), std::string::npos) << m;
  EXPECT_NE(m.find("4 heads"), std::string::npos) << m;
  EXPECT_NE(m.find("have 3"), std::string::npos) << m;
  m = what([] {
    scaled_dot_product_attention(randn({1, 4, 3, 8}), randn({1, 2, 3, 8}), randn({1, 1, 3, 8}));
  });
  EXPECT_NE(m.find("k and v must have one (B, H)"), std::string::npos) << m;
  m = what([] {
    backend_for(kCPU).sdpa_forward(randn({1, 4, 3, 8}), randn({1, 3, 3, 8}), randn({1, 3, 3, 8}),
                                   false, 1.0);
  });
  EXPECT_NE(m.find("sdpa_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("q has 4 heads"), std::string::npos) << m;
}
