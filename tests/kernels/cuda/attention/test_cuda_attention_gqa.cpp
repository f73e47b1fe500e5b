// Grouped-query attention through cuDNN's fused SDPA graphs
// (kernels/cuda/attention/cuda_attention.cpp): k and v with Hkv < H heads read as they are, against
// the CPU's naive twin (which reads key/value head h / (H / Hkv) in place) on the same rounded
// inputs in float32: forward, stats, and dq, dk, dv (dk and dv with Hkv heads, summed over each
// group), bfloat16 and float16, causal and not, multi-query (Hkv = 1) too; and the op on the GPU
// with autograd against the CPU composite. Skipped without a GPU or without cuDNN's frontend
// headers.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/cuda/available.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/raw_ops.h"
#include "support/cuda_attention.h"

using namespace loom;
using namespace loom::testing;

namespace {

struct GqaCase {
  DType dt;
  int64_t H, Hkv, T;
  bool causal;
};

class CudaAttentionGqa : public ::testing::TestWithParam<GqaCase> {};

TEST_P(CudaAttentionGqa, MatchesTheCpuTwin) {
  SKIP_WITHOUT_FUSED_SDPA();
  const auto [dt, H, Hkv, T, causal] = GetParam();
  const int64_t B = 2, D = 64;
  const double scale = 1 / std::sqrt(double(D));
  Tensor q = random_tensor({B, H, T, D}, dt, 1, gpu()),
         k = random_tensor({B, Hkv, T, D}, dt, 2, gpu()),
         v = random_tensor({B, Hkv, T, D}, dt, 3, gpu()),
         go = random_tensor({B, H, T, D}, dt, 4, gpu());
  Backend& be = cuda::cuda_backend();
  auto [out, stats] = be.sdpa_forward(q, k, v, causal, scale);
  SdpaGrads g = be.sdpa_backward(go, q, k, v, out, stats, causal, scale);
  EXPECT_EQ(g.dk.shape(), k.shape());
  EXPECT_EQ(g.dv.shape(), v.shape());
  Backend& cpu = cpu::cpu_backend();
  Tensor qc = f32_on_cpu(q), kc = f32_on_cpu(k), vc = f32_on_cpu(v);
  auto [out_ref, stats_ref] = cpu.sdpa_forward(qc, kc, vc, causal, scale);
  SdpaGrads ref = cpu.sdpa_backward(f32_on_cpu(go), qc, kc, vc, out_ref, stats_ref, causal, scale);
  const double group = double(H / Hkv);
  EXPECT_TRUE(within_attention_bound(out_ref, out, dt, 2)) << "out";
  EXPECT_TRUE(within_attention_bound(stats_ref, stats, dt, 2)) << "stats";
  EXPECT_TRUE(within_attention_bound(ref.dq, g.dq, dt, 8)) << "dq";
  EXPECT_TRUE(within_attention_bound(ref.dk, g.dk, dt, 8 * group)) << "dk";
  EXPECT_TRUE(within_attention_bound(ref.dv, g.dv, dt, 8 * group)) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Heads, CudaAttentionGqa,
                         ::testing::Values(GqaCase{kBF16, 8, 2, 128, true},
                                           GqaCase{kBF16, 8, 2, 128, false},
                                           GqaCase{kF16, 6, 3, 96, true},
                                           GqaCase{kBF16, 4, 1, 64, true}),
                         [](const ::testing::TestParamInfo<GqaCase>& i) {
                           return std::string(i.param.dt == kBF16 ? "bf16" : "fp16") + "H" +
                                  std::to_string(i.param.H) + "Hkv" + std::to_string(i.param.Hkv) +
                                  (i.param.causal ? "causal" : "full");
                         });

// The op with autograd on the GPU (fused, bfloat16) against the CPU composite in float64 on the
// same rounded values: the values and the three gradients.
TEST(CudaAttentionGqaOp, FusedOpMatchesTheCpuComposite) {
  SKIP_WITHOUT_FUSED_SDPA();
  Tensor q0 = random_tensor({1, 8, 40, 32}, kBF16, 5), k0 = random_tensor({1, 2, 40, 32}, kBF16, 6),
         v0 = random_tensor({1, 2, 40, 32}, kBF16, 7), w = random_tensor({1, 8, 40, 32}, kF64, 8);
  auto grads = [&](Device d, DType dt) {
    Tensor q = q0.to(dt).to(d).requires_grad_(true), k = k0.to(dt).to(d).requires_grad_(true),
           v = v0.to(dt).to(d).requires_grad_(true);
    Tensor y = scaled_dot_product_attention(q, k, v, true);
    (y.to(kF64) * w.to(d)).sum().backward();
    return std::vector<Tensor>{y.detach(), q.grad(), k.grad(), v.grad()};
  };
  auto got = grads(gpu(), kBF16), want = grads(kCPU, kF64);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(within_attention_bound(want[i], got[i], kBF16, i == 0 ? 2 : 32)) << names[i];
}

}  // namespace

#endif  // LOOM_WITH_CUDA
