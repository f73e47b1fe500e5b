// scaled_dot_product_attention_packed (autograd/ops/attention_packed.cpp) on the CPU, where it runs
// as views plus the composite: [q | k | v] along the last dim and heads of D consecutive values,
// checked against separate q, k, v tensors copied out of qkv by hand (values, and the gradient
// of qkv equal to the three gradients side by side); a float64 gradcheck; bad shapes named.
// (The fused one-node path on CUDA: CudaAttentionOp.PackedQkv* in test_cuda_attention.cpp.)
#include <gtest/gtest.h>

#include <string>

#include "autograd/gradcheck.h"
#include "autograd/ops/ops.h"

namespace loom {
namespace {

// head h of part i (0 = q, 1 = k, 2 = v) of qkv (B, T, 3C) as a contiguous (B, T, D) copy, then
// all heads stacked as (B, H, T, D), written with loops over the values, not views.
Tensor part_by_hand(const Tensor& qkv, int64_t i, int64_t H) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / H;
  std::vector<double> src = qkv.to_vector<double>(), dst(size_t(B * H * T * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          dst[size_t(((b * H + h) * T + t) * D + d)] =
              src[size_t((b * T + t) * 3 * C + i * C + h * D + d)];
  return from_vector<double>(dst, {B, H, T, D});
}

TEST(AttentionPacked, EqualsSeparateTensorsCutByHand) {
  const int64_t B = 2, T = 5, H = 3, D = 4, C = H * D;
  Generator gen(9);
  Tensor qkv = randn({B, T, 3 * C}, {.dtype = kF64}, &gen).requires_grad_(true);
  Tensor up = randn({B, T, C}, {.dtype = kF64}, &gen);
  Tensor y = scaled_dot_product_attention_packed(qkv, H, /*causal=*/true);
  ASSERT_EQ(y.shape(), Shape({B, T, C}));
  (y * up).sum().backward();
  Tensor q = part_by_hand(qkv.detach(), 0, H).requires_grad_(true),
         k = part_by_hand(qkv.detach(), 1, H).requires_grad_(true),
         v = part_by_hand(qkv.detach(), 2, H).requires_grad_(true);
  Tensor want = scaled_dot_product_attention_composite(q, k, v, true);  // (B, H, T, D)
  (want * up.view({B, T, H, D}).transpose(1, 2)).sum().backward();
  EXPECT_LT(max(abs(y.view({B, T, H, D}).transpose(1, 2) - want)).item(), 1e-14);
  // qkv's gradient: dq | dk | dv, each with its heads side by side
  Tensor g = qkv.grad().view({B, T, 3, H, D});
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor& part = i == 0 ? q : i == 1 ? k : v;
    EXPECT_LT(max(abs(g.select(2, i).transpose(1, 2) - part.grad())).item(), 1e-14) << i;
  }
}

TEST(AttentionPacked, Gradcheck) {
  Generator gen(10);
  Tensor qkv = randn({1, 4, 12}, {.dtype = kF64}, &gen).requires_grad_(true);
  for (bool causal : {false, true}) {
    auto r = autograd::gradcheck(
        [causal](const std::vector<Tensor>& x) {
          return scaled_dot_product_attention_packed(x[0], 2, causal);
        },
        {qkv});
    EXPECT_TRUE(r.ok) << (causal ? "causal: " : "") << r.message;
  }
}

TEST(AttentionPacked, BadShapesAreNamed) {
  auto message = [](const Tensor& qkv, int64_t heads) {
    try {
      scaled_dot_product_attention_packed(qkv, heads);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string odd = message(randn({2, 3, 10}), 1);  // 10 is not 3C
  EXPECT_NE(odd.find("scaled_dot_product_attention_packed"), std::string::npos) << odd;
  EXPECT_NE(odd.find("[2, 3, 10]"), std::string::npos) << odd;
  const std::string heads = message(randn({2, 3, 12}), 3);  // C = 4 is not a multiple of 3 heads
  EXPECT_NE(heads.find("n_head = 3"), std::string::npos) << heads;
  EXPECT_NE(message(randn({6, 12}), 2).find("(B, T, 3C)"), std::string::npos);
}

}  // namespace
}  // namespace loom
