// scaled_dot_product_attention on CUDA (autograd/ops/attention.cpp): bfloat16 and float16 inputs
// with a supported head size take the fused flash-attention path (one autograd node named after
// the op), whose output and q, k, v gradients match the composite's on the same inputs within
// the low dtype's rounding; dropout, float32, anomaly mode and an unsupported head size take the
// composite. Skipped without a GPU; compiles to nothing without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "support/cuda_test_util.h"

using namespace loom;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

Tensor leaf(const Shape& s, uint64_t seed, DType dt) {
  manual_seed(seed);
  return randn(s).to(dt).to(cuda_device(0)).requires_grad_(true);
}

double max_abs(const Tensor& a) { return max(abs(a.to(kF64))).item(); }

// Whether this build has the fused path (cuDNN's frontend headers) for a plain bf16 head.
bool fused_attention_built() {
  Tensor t = leaf({1, 1, 8, 64}, 1, kBF16);
  return sdpa_fused_unsupported(t, t, t).empty();
}

}  // namespace

TEST(CudaAttentionOp, FusedPathMatchesTheComposite) {
  SKIP_WITHOUT_CUDA();
  if (!fused_attention_built()) GTEST_SKIP() << "built without cuDNN's frontend headers";
  for (DType dt : {kBF16, DType::F16})
    for (bool causal : {false, true}) {
      SCOPED_TRACE(str(dtype_name(dt), causal ? " causal" : ""));
      Tensor q = leaf({2, 4, 128, 64}, 2, dt), k = leaf({2, 4, 128, 64}, 3, dt),
             v = leaf({2, 4, 128, 64}, 4, dt);
      ASSERT_TRUE(sdpa_fused_applies(q, k, v, causal, 0.0));
      Tensor y = scaled_dot_product_attention(q, k, v, causal);
      EXPECT_STREQ(y.grad_fn()->name, "scaled_dot_product_attention");
      manual_seed(5);
      Tensor up = randn(y.shape()).to(dt).to(cuda_device(0));
      (y * up).sum().backward();
      Tensor gq = q.grad(), gk = k.grad(), gv = v.grad();
      for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
      Tensor yc = scaled_dot_product_attention_composite(q, k, v, causal);
      (yc * up).sum().backward();
      // bf16 rounds at 2^-8 relative; the composite rounds its scores and weights too.
      double tol = dt == kBF16 ? 3e-2 : 5e-3;
      EXPECT_LE(max_abs(y - yc), tol * (1 + max_abs(yc)));
      EXPECT_LE(max_abs(gq - q.grad()), tol * (1 + max_abs(q.grad())));
      EXPECT_LE(max_abs(gk - k.grad()), tol * (1 + max_abs(k.grad())));
      EXPECT_LE(max_abs(gv - v.grad()), tol * (1 + max_abs(v.grad())));
    }
}

// The packed op (autograd/ops/attention_packed.cpp) on a GPT's (B, T, 3C) projection: one node
// whose backward writes dq, dk, dv into one tensor, against the float64 composite on the CPU (the
// same bf16 values), and against splitting qkv into views for the unpacked fused op on the GPU.
TEST(CudaAttentionOp, PackedQkvMatchesTheCompositeAndTheUnpackedOp) {
  SKIP_WITHOUT_CUDA();
  if (!fused_attention_built()) GTEST_SKIP() << "built without cuDNN's frontend headers";
  const int64_t B = 2, T = 96, H = 3, D = 64, C = H * D;
  Tensor qkv = leaf({B, T, 3 * C}, 7, kBF16);
  Tensor y = scaled_dot_product_attention_packed(qkv, H, /*causal=*/true);
  ASSERT_EQ(y.shape(), Shape({B, T, C}));
  EXPECT_STREQ(y.grad_fn()->name, "scaled_dot_product_attention_packed");
  manual_seed(8);
  Tensor up = randn({B, T, C}).to(kBF16).to(cuda_device(0));
  (y * up).sum().backward();
  Tensor g = qkv.grad();
  // float64 reference on the CPU: the composite on views of the same values
  Tensor q64 = qkv.detach().to(kCPU).to(kF64).requires_grad_(true);
  Tensor y64 = scaled_dot_product_attention_packed(q64, H, true);
  (y64 * up.to(kCPU).to(kF64)).sum().backward();
  EXPECT_LE(max_abs(y.to(kCPU).to(kF64) - y64), 3e-2 * (1 + max_abs(y64)));
  EXPECT_LE(max_abs(g.to(kCPU).to(kF64) - q64.grad()), 3e-2 * (1 + max_abs(q64.grad())));
  // the unpacked fused op on views of the same tensor: the same kernels, other output strides
  Tensor qkv2 = qkv.detach().requires_grad_(true);
  Tensor five = qkv2.view({B, T, 3, H, D});
  Tensor y2 = scaled_dot_product_attention(five.select(2, 0).transpose(1, 2),
                                           five.select(2, 1).transpose(1, 2),
                                           five.select(2, 2).transpose(1, 2), true);
  (y2.transpose(1, 2).reshape({B, T, C}) * up).sum().backward();
  EXPECT_LE(max_abs(y2.transpose(1, 2).reshape({B, T, C}) - y), 1e-2 * (1 + max_abs(y)));
  EXPECT_LE(max_abs(qkv2.grad() - g), 1e-2 * (1 + max_abs(g)));
}

TEST(CudaAttentionOp, TheCompositeRunsWhereTheFusedPathDoesNot) {
  SKIP_WITHOUT_CUDA();
  Tensor q = leaf({1, 2, 16, 64}, 6, kF32), k = leaf({1, 2, 16, 64}, 7, kF32),
         v = leaf({1, 2, 16, 64}, 8, kF32);
  EXPECT_FALSE(sdpa_fused_applies(q, k, v, true, 0.0));  // float32
  Tensor h = leaf({1, 2, 16, 64}, 9, kBF16);
  EXPECT_FALSE(sdpa_fused_applies(h, h, h, true, 0.1));  // dropout
  Tensor odd = leaf({1, 2, 16, 12}, 10, kBF16);
  EXPECT_FALSE(sdpa_fused_applies(odd, odd, odd, true, 0.0));  // D % 8 != 0
  autograd::DetectAnomalyGuard anomaly(true);
  EXPECT_FALSE(sdpa_fused_applies(h, h, h, true, 0.0));
  EXPECT_STRNE(scaled_dot_product_attention(h, h, h, true).grad_fn()->name,
               "scaled_dot_product_attention");
}

#endif  // LOOM_WITH_CUDA
