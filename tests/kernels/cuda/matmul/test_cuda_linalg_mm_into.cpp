// Backend::mm_into_ on CUDA (cuBLASLt with beta 0 or 1 into the given D) against the CPU's: a
// row block of a bigger matrix written, a float32 sum of bfloat16 products accumulated over row
// chunks as linear_cross_entropy does (Note [The classifier in chunks]), float32 strict and
// float64. Skipped without a GPU.
#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "kernels/raw_ops.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

TEST(CudaMmInto, MatchesTheCpuWritingAndAccumulating) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = cuda_device(0);
  Generator gen(42);
  Backend &cpu = backend_for(kCPU), &cuda = backend_for(gpu);
  struct Case {
    DType in, out;
    double tol;
  };
  for (Case c : {Case{kF64, kF64, 1e-12}, Case{kF32, kF32, 1e-5}, Case{kBF16, kF32, 1e-5},
                 Case{kBF16, kBF16, 1e-2}}) {
    SCOPED_TRACE(str(dtype_name(c.in), " -> ", dtype_name(c.out)));
    // The classifier's shapes, small: G (M, V) in row chunks of 24, x (M, C).
    const int64_t M = 72, V = 136, C = 40;
    Tensor g = randn({M, V}, {}, &gen).to(c.in), x = randn({M, C}, {}, &gen).to(c.in);
    Tensor w = randn({V, C}, {}, &gen).to(c.in);
    Tensor q_cpu = empty({V, C}, {.dtype = c.out}), q_gpu = q_cpu.to(gpu);
    Tensor p_cpu = zeros({M + 8, C}, {.dtype = c.out}), p_gpu = p_cpu.to(gpu);
    const Tensor gg = g.to(gpu), xg = x.to(gpu), wg = w.to(gpu);
    for (int64_t s = 0; s < M; s += 24) {
      cpu.mm_into_(raw::slice(p_cpu, 0, s, s + 24, 1), raw::slice(g, 0, s, s + 24, 1), w, false);
      cuda.mm_into_(raw::slice(p_gpu, 0, s, s + 24, 1), raw::slice(gg, 0, s, s + 24, 1), wg, false);
      cpu.mm_into_(q_cpu, raw::transpose(raw::slice(g, 0, s, s + 24, 1), 0, 1),
                   raw::slice(x, 0, s, s + 24, 1), s > 0);
      cuda.mm_into_(q_gpu, raw::transpose(raw::slice(gg, 0, s, s + 24, 1), 0, 1),
                    raw::slice(xg, 0, s, s + 24, 1), s > 0);
    }
    const double sq = max(abs(q_cpu.to(kF64))).item(), sp = max(abs(p_cpu.to(kF64))).item();
    EXPECT_TRUE(all_close(q_cpu.to(kF64), q_gpu.to(kCPU).to(kF64), c.tol * sq));
    EXPECT_TRUE(all_close(p_cpu.to(kF64), p_gpu.to(kCPU).to(kF64), c.tol * sp));
    EXPECT_EQ(max(abs(p_gpu.to(kCPU).slice(0, M, M + 8).to(kF64))).item(), 0.0)
        << "rows past the blocks are untouched";
    // The accumulated sum is the whole product, not the last chunk's.
    const Tensor whole = mm(g.t().to(kF64), x.to(kF64));
    EXPECT_TRUE(all_close(whole, q_gpu.to(kCPU).to(kF64), 3e-2 * sq));
  }
}
