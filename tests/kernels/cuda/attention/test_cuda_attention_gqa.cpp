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
#include "support/nn_kernels_support.h"

using namespace loom;
using namespace loom::testing;

namespace {

std::string fused_missing() {
  Tensor probe = empty({1, 1, 8, 64}, {.dtype = kBF16, .device = gpu()});
  return sdpa_fused_unsupported(probe, probe, probe);
}

#define SKIP_WITHOUT_FUSED_SDPA()                                    \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"; \
  if (std::string why = fused_missing(); !why.empty()) GTEST_SKIP() << why

Tensor f32_on_cpu(const Tensor& t) { return raw::contiguous(raw::cast(t.to(kCPU), kF32)); }

// |got - want| <= c u (max|want| + 1) with u the dtype's unit roundoff (2^-8 bfloat16, 2^-11
// float16): c = 2 forward, 8 backward, as Note [Attention bounds] in
// tests/kernels/cuda/attention/test_cuda_attention.cpp argues for the multi-head case (a group's
// dk and dv add H / Hkv such sums, so they get that factor more).
::testing::AssertionResult within(const Tensor& want, const Tensor& got, DType dt, double c) {
  const double u = dt == kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  if (want.shape() != got.shape())
    return ::testing::AssertionFailure()
           << "shape " << str(got.shape()) << ", want " << str(want.shape());
  std::vector<double> w = host(raw::cast(want, kF64)), g = host(raw::cast(got.to(kCPU), kF64));
  double max_ref = 0, worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(w[i]));
    const double e = std::fabs(g[i] - w[i]);
    if (!(e <= worst)) worst = e;
  }
  const double bound = c * u * (max_ref + 1);
  if (worst <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "error " << worst << " > bound " << bound;
}

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
  EXPECT_TRUE(within(out_ref, out, dt, 2)) << "out";
  EXPECT_TRUE(within(stats_ref, stats, dt, 2)) << "stats";
  EXPECT_TRUE(within(ref.dq, g.dq, dt, 8)) << "dq";
  EXPECT_TRUE(within(ref.dk, g.dk, dt, 8 * group)) << "dk";
  EXPECT_TRUE(within(ref.dv, g.dv, dt, 8 * group)) << "dv";
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
    EXPECT_TRUE(within(want[i], got[i], kBF16, i == 0 ? 2 : 32)) << names[i];
}

}  // namespace

#endif  // LOOM_WITH_CUDA
