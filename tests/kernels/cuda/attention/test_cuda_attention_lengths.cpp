// Key lengths as cuDNN's padding mask (kernels/cuda/attention/cuda_attention.cpp, Note [Key
// lengths] in autograd/ops/attention.cpp): the fused forward and backward with lengths against the
// CPU twin with the same lengths on the same rounded inputs (a BERT-like padded batch, causal with
// lengths, grouped heads, one query over a static cache's slots); exact zeros in dk and dv at
// padded keys; new lengths written in place into the same tensor give the new answer from the same
// cached graph (what a CUDA-graph decode step relies on); and the attention op with autograd on the
// GPU taking the fused path with lengths, against the CPU composite in float64; one query and one
// key (which cuDNN refuses) through the composite. Skipped without a
// GPU or without cuDNN's frontend headers.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/available.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/attention/cudnn_sdpa.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/raw_ops.h"
#include "support/cuda_attention.h"

using namespace loom;
using namespace loom::testing;

namespace {

Tensor lengths_tensor(const std::vector<int64_t>& len, Device d) {
  Tensor t = empty({int64_t(len.size())}, {.dtype = kI64});
  std::copy(len.begin(), len.end(), t.data<int64_t>());
  return t.to(d);
}

// v (B, Hkv, T, D) -> (B, Hkv * n, T, D), each head n times in a row (query head h reads head h /
// n).
Tensor repeat_interleave_heads(const Tensor& v, int64_t n) {
  const int64_t B = v.size(0), Hkv = v.size(1), T = v.size(2), D = v.size(3);
  return reshape(expand(unsqueeze(v, 2), {B, Hkv, n, T, D}), {B, Hkv * n, T, D});
}

struct LengthsCase {
  int64_t H, Hkv, Tq, Tk;
  bool causal;
  std::vector<int64_t> lengths;
  const char* name;
};

class CudaAttentionLengths : public ::testing::TestWithParam<LengthsCase> {};

TEST_P(CudaAttentionLengths, MatchesTheCpuTwin) {
  SKIP_WITHOUT_FUSED_SDPA();
  const LengthsCase& c = GetParam();
  const int64_t B = int64_t(c.lengths.size()), D = 64;
  const double scale = 1 / std::sqrt(double(D));
  Tensor q = random_tensor({B, c.H, c.Tq, D}, kBF16, 1, gpu()),
         k = random_tensor({B, c.Hkv, c.Tk, D}, kBF16, 2, gpu()),
         v = random_tensor({B, c.Hkv, c.Tk, D}, kBF16, 3, gpu()),
         go = random_tensor({B, c.H, c.Tq, D}, kBF16, 4, gpu());
  Backend& be = cuda::cuda_backend();
  const Tensor len = lengths_tensor(c.lengths, gpu()), len_cpu = lengths_tensor(c.lengths, kCPU);
  auto [out, stats] = be.sdpa_forward(q, k, v, c.causal, scale, len);
  SdpaGrads g = be.sdpa_backward(go, q, k, v, out, stats, c.causal, scale, {}, len);
  Backend& cpu = cpu::cpu_backend();
  Tensor qc = f32_on_cpu(q), kc = f32_on_cpu(k), vc = f32_on_cpu(v);
  auto [out_ref, stats_ref] = cpu.sdpa_forward(qc, kc, vc, c.causal, scale, len_cpu);
  SdpaGrads ref = cpu.sdpa_backward(f32_on_cpu(go), qc, kc, vc, out_ref, stats_ref, c.causal, scale,
                                    {}, len_cpu);
  const double group = double(c.H / c.Hkv);
  EXPECT_TRUE(within_attention_bound(out_ref, out, kBF16, 2)) << "out";
  EXPECT_TRUE(within_attention_bound(stats_ref, stats, kBF16, 2)) << "stats";
  EXPECT_TRUE(within_attention_bound(ref.dq, g.dq, kBF16, 8)) << "dq";
  EXPECT_TRUE(within_attention_bound(ref.dk, g.dk, kBF16, 8 * group)) << "dk";
  EXPECT_TRUE(within_attention_bound(ref.dv, g.dv, kBF16, 8 * group)) << "dv";
  // Padded keys get no gradient: exact zeros.
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = c.lengths[size_t(b)];
    if (n == c.Tk) continue;
    for (const Tensor* d : {&g.dk, &g.dv}) {
      Tensor pad = raw::slice(raw::slice(d->to(kCPU), 0, b, b + 1, 1), 2, n, c.Tk, 1);
      EXPECT_EQ(max(abs(raw::cast(raw::contiguous(pad), kF32))).item(), 0.0) << "row " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Padding, CudaAttentionLengths,
                         ::testing::Values(LengthsCase{4, 4, 128, 128, false, {128, 37, 1}, "bert"},
                                           LengthsCase{4, 4, 96, 96, true, {96, 50}, "causal"},
                                           LengthsCase{8, 2, 64, 64, false, {20, 64}, "gqa"},
                                           LengthsCase{8, 2, 1, 144, false, {5, 144}, "decode"}),
                         [](const ::testing::TestParamInfo<LengthsCase>& i) {
                           return std::string(i.param.name);
                         });

// The lengths are read when the graph runs, not when it is built: writing new values into the
// same tensor gives the new answer from the graph already cached (no new graph is built), as a
// replayed CUDA-graph decode step needs.
TEST(CudaAttentionLengthsOp, NewLengthsInPlaceUseTheSameGraph) {
  SKIP_WITHOUT_FUSED_SDPA();
  const int64_t B = 2, H = 4, Tk = 80, D = 64;
  Tensor q = random_tensor({B, H, 1, D}, kBF16, 5, gpu()),
         k = random_tensor({B, H, Tk, D}, kBF16, 6, gpu()),
         v = random_tensor({B, H, Tk, D}, kBF16, 7, gpu());
  Backend& be = cuda::cuda_backend();
  Tensor len = lengths_tensor({3, 9}, gpu());
  be.sdpa_forward(q, k, v, false, 0.125, len);
  const size_t graphs = cuda::sdpa_graph_count();
  len.copy_(lengths_tensor({70, 1}, gpu()));
  Tensor out = be.sdpa_forward(q, k, v, false, 0.125, len).first;
  EXPECT_EQ(cuda::sdpa_graph_count(), graphs);
  Tensor want = cpu::cpu_backend()
                    .sdpa_forward(f32_on_cpu(q), f32_on_cpu(k), f32_on_cpu(v), false, 0.125,
                                  lengths_tensor({70, 1}, kCPU))
                    .first;
  EXPECT_TRUE(within_attention_bound(want, out, kBF16, 2));
}

// The op with autograd on the GPU (bfloat16, key lengths: the fused path, one new graph per
// direction) against the CPU composite in float64 on the same rounded values.
TEST(CudaAttentionLengthsOp, FusedOpMatchesTheCpuComposite) {
  SKIP_WITHOUT_FUSED_SDPA();
  Tensor q0 = random_tensor({3, 4, 48, 32}, kBF16, 8), k0 = random_tensor({3, 2, 48, 32}, kBF16, 9),
         v0 = random_tensor({3, 2, 48, 32}, kBF16, 10), w = random_tensor({3, 4, 48, 32}, kF64, 11);
  auto grads = [&](Device d, DType dt) {
    Tensor q = q0.to(dt).to(d).requires_grad_(true), k = k0.to(dt).to(d).requires_grad_(true),
           v = v0.to(dt).to(d).requires_grad_(true);
    Tensor y = scaled_dot_product_attention(q, k, v, lengths_tensor({48, 13, 2}, d), false);
    (y.to(kF64) * w.to(d)).sum().backward();
    return std::vector<Tensor>{y.detach(), q.grad(), k.grad(), v.grad()};
  };
  const size_t before = cuda::sdpa_graph_count();
  auto got = grads(gpu(), kBF16);
  EXPECT_EQ(cuda::sdpa_graph_count(), before + 2) << "the fused forward and backward graphs";
  auto want = grads(kCPU, kF64);
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(within_attention_bound(want[i], got[i], kBF16, i == 0 ? 2 : 32)) << names[i];
}

// cuDNN refuses Tq = Tk = 1 (a one-token prompt's attention): the op asks and runs its composite,
// whose softmax over one key is 1, so the output is v itself.
TEST(CudaAttentionLengthsOp, OneQueryAndOneKeyRunTheComposite) {
  SKIP_WITHOUT_FUSED_SDPA();
  Tensor q = random_tensor({2, 4, 1, 64}, kBF16, 12, gpu()),
         k = random_tensor({2, 2, 1, 64}, kBF16, 13, gpu()),
         v = random_tensor({2, 2, 1, 64}, kBF16, 14, gpu());
  EXPECT_NE(sdpa_fused_unsupported(q, k, v).find("one query and one key"), std::string::npos);
  Tensor y = scaled_dot_product_attention(q, k, v, true);
  Tensor want = repeat_interleave_heads(v, 2);
  EXPECT_EQ(max(abs(to(y, kF32) - to(want, kF32))).item(), 0.0);
}

}  // namespace

#endif  // LOOM_WITH_CUDA
