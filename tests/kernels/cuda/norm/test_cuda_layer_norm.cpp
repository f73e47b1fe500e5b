// The CUDA layer norm kernels (kernels/cuda/norm/cuda_layer_norm.cu) against the CPU ones at the
// gpt workload's size (16384 rows of 768: 32 row chunks in the column sums) and at odd sizes (rows
// not a multiple of the block's 8, widths not a multiple of 32, one row): y, mean, rstd, dx,
// grad_weight and grad_bias in float32 and float64, and the backward bit-identical run to run; the
// residual add and 16-bit y and dy (LayerNormExtras) and the backward's added gradient and 16-bit
// dx (LayerNormBackwardExtras) against the CPU's composed version.
// Skipped without a GPU; compiles to nothing without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

void compare(int64_t M, int64_t N, DType dt, bool affine) {
  SCOPED_TRACE(str(M, " x ", N, " ", dtype_name(dt), affine ? " affine" : ""));
  manual_seed(uint64_t(M * 7 + N));
  Tensor x = randn({M, N}, {.dtype = dt}) * 3.0 + 0.5, dy = randn({M, N}, {.dtype = dt});
  Tensor w = affine ? randn({N}, {.dtype = dt}) : Tensor();
  Tensor b = affine ? randn({N}, {.dtype = dt}) : Tensor();
  Backend& cpu = backend_for(kCPU);
  Backend& gpu = backend_for(cuda_device(0));
  auto to_gpu = [](const Tensor& t) { return t.defined() ? t.to(cuda_device(0)) : Tensor(); };
  LayerNormOut c = cpu.layer_norm(x, w, b, 1e-5);
  LayerNormOut g = gpu.layer_norm(to_gpu(x), to_gpu(w), to_gpu(b), 1e-5);
  double tol = dt == kF64 ? 1e-10 : 1e-4;
  EXPECT_TRUE(all_close(c.y, g.y.to(kCPU), tol));
  EXPECT_TRUE(all_close(c.mean, g.mean.to(kCPU), tol));
  EXPECT_TRUE(all_close(c.rstd, g.rstd.to(kCPU), tol));
  LayerNormGrads cg = cpu.layer_norm_backward(dy, x, w, c.mean, c.rstd, affine, affine);
  LayerNormGrads gg =
      gpu.layer_norm_backward(to_gpu(dy), to_gpu(x), to_gpu(w), g.mean, g.rstd, affine, affine);
  EXPECT_TRUE(all_close(cg.grad_input, gg.grad_input.to(kCPU), tol));
  if (affine) {
    // Column sums over M rows: float32 rounding grows with sqrt(M).
    double ctol = dt == kF64 ? 1e-9 : 2e-3;
    EXPECT_TRUE(all_close(cg.grad_weight, gg.grad_weight.to(kCPU), ctol));
    EXPECT_TRUE(all_close(cg.grad_bias, gg.grad_bias.to(kCPU), ctol));
    LayerNormGrads again =
        gpu.layer_norm_backward(to_gpu(dy), to_gpu(x), to_gpu(w), g.mean, g.rstd, true, true);
    EXPECT_TRUE(all_equal(gg.grad_weight, again.grad_weight));
    EXPECT_TRUE(all_equal(gg.grad_bias, again.grad_bias));
  }
}

}  // namespace

TEST(CudaLayerNorm, MatchesTheCpuAtTheGptSize) {
  SKIP_WITHOUT_CUDA();
  compare(16384, 768, kF32, true);
}

TEST(CudaLayerNorm, MatchesTheCpuAtOddSizes) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {kF32, kF64})
    for (auto [M, N] : {std::pair<int64_t, int64_t>{1, 5}, {13, 33}, {257, 100}, {1000, 1}})
      for (bool affine : {false, true}) compare(M, N, dt, affine);
}

// Wide rows (8000 columns: 250 column tiles in both stages of the column sums).
TEST(CudaLayerNorm, MatchesTheCpuForWideRows) {
  SKIP_WITHOUT_CUDA();
  compare(37, 8000, kF32, true);
}

// The backward's extras (LayerNormBackwardExtras): a gradient added to dx as it is written, and
// dx written again in 16 bits (the residual branch's copy), with the column sums and without.
// dx against the CPU (which adds after its loops); the copy
// is exactly dx rounded (the kernel rounds the value it writes) and within one rounding of the
// CPU's.
TEST(CudaLayerNorm, AddsAGradientAndWritesA16BitCopyOfDx) {
  SKIP_WITHOUT_CUDA();
  Backend& cpu = backend_for(kCPU);
  Backend& gpu = backend_for(cuda_device(0));
  for (DType low : {kBF16, DType::F16})
    for (bool sums : {true, false}) {
      SCOPED_TRACE(str(dtype_name(low), sums ? " with column sums" : " dx only"));
      manual_seed(78);
      const int64_t M = 517, N = 768;
      Tensor x = randn({M, N}) * 2.0, dy = randn({M, N}).to(low), w = randn({N});
      Tensor add = randn({M, N});
      LayerNormOut c = cpu.layer_norm(x, w, Tensor(), 1e-5);
      LayerNormGrads cg = cpu.layer_norm_backward(dy, x, w, c.mean, c.rstd, sums, sums,
                                                  LayerNormBackwardExtras{add, low});
      LayerNormGrads gg =
          gpu.layer_norm_backward(dy.to(cuda_device(0)), x.to(cuda_device(0)), w.to(cuda_device(0)),
                                  c.mean.to(cuda_device(0)), c.rstd.to(cuda_device(0)), sums, sums,
                                  LayerNormBackwardExtras{add.to(cuda_device(0)), low});
      EXPECT_TRUE(all_close(cg.grad_input, gg.grad_input.to(kCPU), 1e-4));
      ASSERT_EQ(gg.grad_input_low.dtype(), low);
      EXPECT_TRUE(all_equal(gg.grad_input_low.to(kCPU), gg.grad_input.to(low).to(kCPU)));
      Tensor lc = cg.grad_input_low.to(kF64), lg = gg.grad_input_low.to(kCPU).to(kF64);
      EXPECT_LT(max(abs(lc - lg) - abs(lc) / 128).item(), 1e-3);
      if (sums) {
        EXPECT_TRUE(all_close(cg.grad_weight, gg.grad_weight.to(kCPU), 2e-3));
      }
    }
}

// A bfloat16 (and a float16) residual added in the kernel, y written in 16 bits, a 16-bit dy read
// as it is: against the CPU, which composes the add and the casts around its loops. The sum is
// the same float32 additions (bit for bit); y within one 16-bit rounding; dx and the column sums
// as in the float32 comparison.
TEST(CudaLayerNorm, ResidualAndBf16Io) {
  SKIP_WITHOUT_CUDA();
  Backend& cpu = backend_for(kCPU);
  Backend& gpu = backend_for(cuda_device(0));
  for (DType low : {kBF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(low));
    manual_seed(77);
    const int64_t M = 1000, N = 768;
    Tensor x = randn({M, N}) * 2.0, res = randn({M, N}).to(low), dy = randn({M, N}).to(low);
    Tensor w = randn({N}), b = randn({N});
    LayerNormExtras e{.residual = res, .y_dtype = low};
    LayerNormOut c = cpu.layer_norm(x, w, b, 1e-5, e);
    LayerNormExtras eg{.residual = res.to(cuda_device(0)), .y_dtype = low};
    LayerNormOut g =
        gpu.layer_norm(x.to(cuda_device(0)), w.to(cuda_device(0)), b.to(cuda_device(0)), 1e-5, eg);
    ASSERT_EQ(g.y.dtype(), low);
    EXPECT_TRUE(all_equal(c.sum, g.sum.to(kCPU)));
    Tensor yc = c.y.to(kF64), yg = g.y.to(kCPU).to(kF64);
    EXPECT_LT(max(abs(yc - yg) - abs(yc) / 128).item(), 1e-3);
    EXPECT_TRUE(all_close(c.rstd, g.rstd.to(kCPU), 1e-4));
    LayerNormGrads cg = cpu.layer_norm_backward(dy, c.sum, w, c.mean, c.rstd, true, true);
    LayerNormGrads gg = gpu.layer_norm_backward(dy.to(cuda_device(0)), g.sum, w.to(cuda_device(0)),
                                                g.mean, g.rstd, true, true);
    EXPECT_TRUE(all_close(cg.grad_input, gg.grad_input.to(kCPU), 1e-4));
    EXPECT_TRUE(all_close(cg.grad_weight, gg.grad_weight.to(kCPU), 2e-3));
    EXPECT_TRUE(all_close(cg.grad_bias, gg.grad_bias.to(kCPU), 2e-3));
  }
}

#endif  // LOOM_WITH_CUDA
