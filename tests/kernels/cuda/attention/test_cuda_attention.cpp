// CUDA flash attention (kernels/cuda/attention/cuda_attention.cpp through cuDNN's SDPA graphs)
// against the CPU's naive twin (kernels/cpu/cpu_attention.cpp) run in float32 on the same rounded
// inputs: forward, stats and backward in bfloat16 and float16, causal and not, T = 64 and 1024;
// memory that grows with T, not T x T (T = 1024 and 4096); q, k, v as views of one qkv buffer read
// in place; a deterministic backward; the errors that name each limit. Skipped without a GPU;
// compiles to nothing without LOOM_WITH_CUDA; skipped in a build without cuDNN's frontend headers,
// where one test checks the error that says how to install them.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/available.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/attention/cudnn_sdpa.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/raw_ops.h"
#include "support/cuda_attention.h"
#include "support/errors.h"

using loom::test::expect_error;
using namespace loom;
using namespace loom::testing;

namespace {

Backend& gpu_be() { return cuda::cuda_backend(); }

// The backward's algorithm for a scope (Note [Deterministic attention backward] in
// kernels/cuda/attention/cudnn_sdpa.h), whatever LOOM_SDPA_DETERMINISTIC says.
struct SdpaAlgorithm {
  bool before = cuda::sdpa_deterministic();
  explicit SdpaAlgorithm(bool deterministic) { cuda::set_sdpa_deterministic(deterministic); }
  ~SdpaAlgorithm() { cuda::set_sdpa_deterministic(before); }
};
Backend& cpu_be() { return cpu::cpu_backend(); }

// Note [Attention bounds]
// The CPU twin runs on the same rounded inputs in float32 storage with float64 sums, so what it
// misses is what the fused kernel rounds: its output (half a unit u of the dtype, relative:
// u = 2^-8 for bfloat16, 2^-11 for float16) and, inside, the probabilities P rounded to the input
// type before P v, and dS before dS k and dS^T q (tensor-core inputs), each a relative error of at
// most u/2 on terms whose sum is at most max|ref| in size. So every element is held to
//   |got - want| <= c u max|want| + c u,
// c = 2 for the output and the stats (two roundings), 8 for the gradients (dP, dS, and
// Di = dO . out from the rounded output enter each). For bfloat16 the forward's bound,
// 7.8e-3 max|ref| + 7.8e-3, is tighter than the 2e-2 max|ref| + 1e-2. Measured on an H200
// (B 2, H 4, D 64, T 64 and 1024): the largest error was a quarter of its bound in the forward and
// a seventh in the gradients. A wrong mask, scale or missing term moves elements by O(max|ref|).
struct Bound {
  double rel, abs;
};
Bound forward_bound(DType dt) {
  double u = dt == kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  return {2 * u, 2 * u};
}
Bound backward_bound(DType dt) {
  double u = dt == kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  return {8 * u, 8 * u};
}

::testing::AssertionResult within(const Tensor& want, const Tensor& got, Bound b) {
  std::vector<double> w = host(raw::cast(want, kF64)), g = host(raw::cast(got.to(kCPU), kF64));
  if (want.shape() != got.shape() || w.size() != g.size())
    return ::testing::AssertionFailure()
           << "shape " << str(got.shape()) << ", expected " << str(want.shape());
  double max_ref = 0, worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(w[i]));
    double e = std::fabs(g[i] - w[i]);
    if (!(e <= worst)) worst = e, at = i;  // NaN counts as the worst
  }
  double bound = b.rel * max_ref + b.abs;
  std::cout << "  max error " << worst << ", bound " << bound << " (" << worst / bound
            << " of it), max|ref| " << max_ref << "\n";
  if (worst <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << at << " is " << g[at] << ", the CPU twin gives " << w[at] << ": error "
         << worst << " > bound " << bound << " (max|ref| " << max_ref << ")";
}

struct AttnCase {
  DType dt;
  int64_t T;
  bool causal;
};
std::string case_name(const ::testing::TestParamInfo<AttnCase>& i) {
  return std::string(i.param.dt == kBF16 ? "bf16" : "fp16") + "T" + std::to_string(i.param.T) +
         (i.param.causal ? "causal" : "full");
}

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

// B = 2, H = 4, D = 64: forward, stats and backward against the CPU twin in float32.
TEST_P(CudaAttention, MatchesTheCpuTwin) {
  SKIP_WITHOUT_FUSED_SDPA();
  const auto [dt, T, causal] = GetParam();
  const int64_t B = 2, H = 4, D = 64;
  const double scale = 1 / std::sqrt(double(D));
  Tensor q = random_tensor({B, H, T, D}, dt, 1, gpu()),
         k = random_tensor({B, H, T, D}, dt, 2, gpu()),
         v = random_tensor({B, H, T, D}, dt, 3, gpu()),
         go = random_tensor({B, H, T, D}, dt, 4, gpu());
  auto [out, stats] = gpu_be().sdpa_forward(q, k, v, causal, scale);
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_EQ(stats.dtype(), kF32);
  EXPECT_EQ(out.strides(), Strides({T * H * D, D, H * D, 1}));  // Note [Attention layout]
  SdpaGrads g = gpu_be().sdpa_backward(go, q, k, v, out, stats, causal, scale);

  Tensor qc = f32_on_cpu(q), kc = f32_on_cpu(k), vc = f32_on_cpu(v), goc = f32_on_cpu(go);
  auto [out_ref, stats_ref] = cpu_be().sdpa_forward(qc, kc, vc, causal, scale);
  SdpaGrads ref = cpu_be().sdpa_backward(goc, qc, kc, vc, out_ref, stats_ref, causal, scale);
  EXPECT_TRUE(within(out_ref, out, forward_bound(dt))) << "out";
  EXPECT_TRUE(within(stats_ref, stats, forward_bound(dt))) << "stats (logsumexp)";
  EXPECT_TRUE(within(ref.dq, g.dq, backward_bound(dt))) << "dq";
  EXPECT_TRUE(within(ref.dk, g.dk, backward_bound(dt))) << "dk";
  EXPECT_TRUE(within(ref.dv, g.dv, backward_bound(dt))) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttnCase{kBF16, 64, false}, AttnCase{kBF16, 64, true},
                                           AttnCase{kBF16, 1024, false},
                                           AttnCase{kBF16, 1024, true}, AttnCase{kF16, 64, true},
                                           AttnCase{kF16, 1024, false}, AttnCase{kF16, 1024, true}),
                         case_name);

// Tq != Tk (top-left causal: query i sees keys 0..i), odd lengths, a scale other than 1/sqrt(D).
TEST(CudaAttentionShapes, UnequalAndOddLengths) {
  SKIP_WITHOUT_FUSED_SDPA();
  for (auto [Tq, Tk, causal] : {std::tuple{37, 37, true}, {24, 80, false}, {24, 80, true}}) {
    SCOPED_TRACE("Tq " + std::to_string(Tq) + " Tk " + std::to_string(Tk) +
                 (causal ? " causal" : ""));
    const int64_t B = 1, H = 3, D = 32;
    Tensor q = random_tensor({B, H, Tq, D}, kBF16, 5, gpu()),
           k = random_tensor({B, H, Tk, D}, kBF16, 6, gpu()),
           v = random_tensor({B, H, Tk, D}, kBF16, 7, gpu()),
           go = random_tensor({B, H, Tq, D}, kBF16, 8, gpu());
    auto [out, stats] = gpu_be().sdpa_forward(q, k, v, causal, 0.3);
    SdpaGrads g = gpu_be().sdpa_backward(go, q, k, v, out, stats, causal, 0.3);
    Tensor qc = f32_on_cpu(q), kc = f32_on_cpu(k), vc = f32_on_cpu(v);
    auto [out_ref, stats_ref] = cpu_be().sdpa_forward(qc, kc, vc, causal, 0.3);
    SdpaGrads ref =
        cpu_be().sdpa_backward(f32_on_cpu(go), qc, kc, vc, out_ref, stats_ref, causal, 0.3);
    EXPECT_TRUE(within(out_ref, out, forward_bound(kBF16))) << "out";
    EXPECT_TRUE(within(stats_ref, stats, forward_bound(kBF16))) << "stats";
    EXPECT_TRUE(within(ref.dq, g.dq, backward_bound(kBF16))) << "dq";
    EXPECT_TRUE(within(ref.dk, g.dk, backward_bound(kBF16))) << "dk";
    EXPECT_TRUE(within(ref.dv, g.dv, backward_bound(kBF16))) << "dv";
  }
}

// q, k, v as views of one (B, T, 3, H, D) buffer (a GPT's fused qkv projection): read in place,
// without copies, and the same values as contiguous inputs give.
TEST(CudaAttentionShapes, ViewsOfOneQkvBufferAreReadInPlace) {
  SKIP_WITHOUT_FUSED_SDPA();
  const int64_t B = 2, T = 256, H = 4, D = 64;
  Tensor qkv = random_tensor({B, T, 3, H, D}, kBF16, 9, gpu());
  auto part = [&](int64_t i) { return raw::permute(raw::select(qkv, 2, i), {0, 2, 1, 3}); };
  Tensor q = part(0), k = part(1), v = part(2);
  ASSERT_FALSE(q.is_contiguous());
  Tensor go = random_tensor({B, H, T, D}, kBF16, 10, gpu());
  Tensor qd = raw::contiguous(q), kd = raw::contiguous(k), vd = raw::contiguous(v);
  gpu_be().sdpa_forward(qd, kd, vd, true, 0.125);  // builds the contiguous key's graph first
  gpu_be().sdpa_forward(q, k, v, true, 0.125);     // ... and the strided one's

  // Allocations of one call on each layout: a copy of q, k and v would add three.
  auto allocs = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
    uint64_t before = cuda::memory_stats(0).num_allocs;
    gpu_be().sdpa_forward(a, b, c, true, 0.125);
    return cuda::memory_stats(0).num_allocs - before;
  };
  EXPECT_LT(allocs(q, k, v), allocs(qd, kd, vd) + 3) << "q, k, v views were copied";

  auto [out, stats] = gpu_be().sdpa_forward(q, k, v, true, 0.125);
  SdpaGrads g = gpu_be().sdpa_backward(go, q, k, v, out, stats, true, 0.125);
  Tensor qc = f32_on_cpu(q), kc = f32_on_cpu(k), vc = f32_on_cpu(v);
  auto [out_ref, stats_ref] = cpu_be().sdpa_forward(qc, kc, vc, true, 0.125);
  SdpaGrads ref =
      cpu_be().sdpa_backward(f32_on_cpu(go), qc, kc, vc, out_ref, stats_ref, true, 0.125);
  EXPECT_TRUE(within(out_ref, out, forward_bound(kBF16))) << "out";
  EXPECT_TRUE(within(ref.dq, g.dq, backward_bound(kBF16))) << "dq";
  EXPECT_TRUE(within(ref.dk, g.dk, backward_bound(kBF16))) << "dk";
  EXPECT_TRUE(within(ref.dv, g.dv, backward_bound(kBF16))) << "dv";
}

// Bytes allocated at the peak of one forward and backward, beyond the inputs.
size_t peak_bytes(int64_t T) {
  const int64_t B = 2, H = 4, D = 64;
  Tensor q = random_tensor({B, H, T, D}, kBF16, 11, gpu()),
         k = random_tensor({B, H, T, D}, kBF16, 12, gpu()),
         v = random_tensor({B, H, T, D}, kBF16, 13, gpu()),
         go = random_tensor({B, H, T, D}, kBF16, 14, gpu());
  auto run = [&] {
    auto [out, stats] = gpu_be().sdpa_forward(q, k, v, true, 0.125);
    SdpaGrads g = gpu_be().sdpa_backward(go, q, k, v, out, stats, true, 0.125);
    cuda::synchronize(0);
  };
  run();  // graphs built, the allocator's cache warm
  const size_t base = cuda::memory_stats(0).allocated;
  cuda::reset_peak_memory_stats(0);
  run();
  return cuda::memory_stats(0).peak_allocated - base;
}

// The T x T scores are never stored: at T = 4096 one bf16 score matrix of every head would take
// B * H * T * T * 2 = 256 MiB; the forward and backward together stay far below it, and going from
// T = 1024 to 4096 multiplies their memory by about 4 (linear), not 16 (quadratic).
TEST(CudaAttentionShapes, MemoryGrowsWithTNotTSquared) {
  SKIP_WITHOUT_FUSED_SDPA();
  SdpaAlgorithm atomics(false);  // the default
  const int64_t B = 2, H = 4, T = 4096;
  const size_t at_1024 = peak_bytes(1024), at_4096 = peak_bytes(T);
  const size_t scores = size_t(B * H * T * T * 2);
  std::cout << "sdpa forward + backward peak: " << at_1024 << " bytes at T = 1024, " << at_4096
            << " at T = 4096 (one bf16 score matrix per head: " << scores << ")\n";
  EXPECT_LT(at_4096, scores / 4);
  EXPECT_LT(double(at_4096), 8.0 * double(at_1024));
}

// cuDNN's deterministic backward: the same bits on every run, the same values as the default
// algorithm within rounding; a repeated call builds no graph.
TEST(CudaAttentionShapes, DeterministicBackwardRepeatsItsBitsAndGraphsAreCached) {
  SKIP_WITHOUT_FUSED_SDPA();
  SdpaAlgorithm deterministic(true);
  const int64_t B = 2, H = 4, T = 512, D = 64;
  Tensor q = random_tensor({B, H, T, D}, kBF16, 15, gpu()),
         k = random_tensor({B, H, T, D}, kBF16, 16, gpu()),
         v = random_tensor({B, H, T, D}, kBF16, 17, gpu()),
         go = random_tensor({B, H, T, D}, kBF16, 18, gpu());
  auto [out, stats] = gpu_be().sdpa_forward(q, k, v, true, 0.125);
  SdpaGrads a = gpu_be().sdpa_backward(go, q, k, v, out, stats, true, 0.125);
  const size_t graphs = cuda::sdpa_graph_count();
  SdpaGrads b = gpu_be().sdpa_backward(go, q, k, v, out, stats, true, 0.125);
  EXPECT_EQ(cuda::sdpa_graph_count(), graphs);
  EXPECT_EQ(host(a.dq), host(b.dq));
  EXPECT_EQ(host(a.dk), host(b.dk));
  EXPECT_EQ(host(a.dv), host(b.dv));
  cuda::set_sdpa_deterministic(false);
  SdpaGrads atomic = gpu_be().sdpa_backward(go, q, k, v, out, stats, true, 0.125);
  EXPECT_TRUE(within(f32_on_cpu(a.dq), atomic.dq, backward_bound(kBF16))) << "dq";
  EXPECT_TRUE(within(f32_on_cpu(a.dk), atomic.dk, backward_bound(kBF16))) << "dk";
}

// With the deterministic algorithm the workspace holds one partial dQ per 128 keys: it grows with
// T x T, which is why it is not the default (Note [Deterministic attention backward]).
TEST(CudaAttentionShapes, DeterministicBackwardTradesMemory) {
  SKIP_WITHOUT_FUSED_SDPA();
  size_t by_default = 0, deterministic = 0;
  {
    SdpaAlgorithm atomics(false);
    by_default = peak_bytes(4096);
  }
  {
    SdpaAlgorithm bit_exact(true);
    deterministic = peak_bytes(4096);
  }
  std::cout << "sdpa at T = 4096: " << by_default << " bytes by default, " << deterministic
            << " deterministic\n";
  EXPECT_GT(deterministic, 4 * by_default);
}

TEST(CudaAttentionShapes, ErrorsNameTheLimit) {
  SKIP_WITHOUT_FUSED_SDPA();
  Tensor f32 = empty({1, 2, 8, 64}, {.dtype = kF32, .device = gpu()});
  expect_error([&] { gpu_be().sdpa_forward(f32, f32, f32, false, 1.0); },
               {"sdpa_forward", "float32", "float16 and bfloat16"});
  Tensor wide = empty({1, 2, 8, 160}, {.dtype = kBF16, .device = gpu()});
  expect_error([&] { gpu_be().sdpa_forward(wide, wide, wide, false, 1.0); },
               {"sdpa_forward", "D = 160", "D <= 128"});
  Tensor odd = empty({1, 2, 8, 12}, {.dtype = kF16, .device = gpu()});
  expect_error([&] { gpu_be().sdpa_forward(odd, odd, odd, false, 1.0); }, {"D = 12", "D % 8 == 0"});
}

// In a build without the frontend headers the methods say how to get them.
TEST(CudaAttentionShapes, WithoutTheFrontendTheErrorSaysHowToInstallIt) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (fused_sdpa_missing().empty()) GTEST_SKIP() << "this loom has the fused path";
  Tensor q = empty({1, 2, 8, 64}, {.dtype = kBF16, .device = gpu()});
  expect_error([&] { gpu_be().sdpa_forward(q, q, q, false, 1.0); },
               {"sdpa_forward", "install-deps.sh"});
}

}  // namespace

#endif  // LOOM_WITH_CUDA
