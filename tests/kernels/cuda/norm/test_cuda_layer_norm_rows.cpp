// The layer norm's fast path (Note [Layer norm, a row in registers] in
// kernels/cuda/norm/cuda_layer_norm_rows.cu) against the general kernels on the same GPU: the same
// rows once in aligned memory (the fast path) and once 4 bytes off (which it declines, so the
// general kernels run), for every register width V (N = 4 ... 1024, not only multiples of 128),
// row counts around the backward's 64-row blocks, with and without weight and bias, a bfloat16
// residual, y, dy and dx copy, an added gradient; the column sums bit-identical run to run.
// test_cuda_layer_norm.cpp checks both paths against the CPU. Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "core/tensor_views.h"
#include "kernels/backend.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// t's values in GPU memory that starts 4 bytes past a 16-byte boundary (float32 t) or 2 past an
// 8-byte one (bfloat16): contiguous, but the fast path will not take it.
Tensor misaligned(const Tensor& t) {
  Tensor flat = empty({t.numel() + 1}, {.dtype = t.dtype(), .device = cuda_device(0)});
  Tensor v = raw::view(raw::slice(flat, 0, 1, t.numel() + 1, 1), t.shape());
  v.copy_(t.to(cuda_device(0)));
  return v;
}

struct Case {
  int64_t M, N;
  bool affine;
  DType low;  // the residual's, y's, dy's and the dx copy's dtype: float32 (none) or bfloat16
};

// Forward and backward of one case by the fast path (aligned) and the general one (misaligned).
void compare(const Case& c) {
  SCOPED_TRACE(str(c.M, " x ", c.N, c.affine ? " affine " : " ", dtype_name(c.low)));
  manual_seed(uint64_t(c.M * 31 + c.N));
  const Device g = cuda_device(0);
  const bool io16 = c.low != kF32;
  Tensor x = (randn({c.M, c.N}) * 2.0 + 0.25).to(g), dy = randn({c.M, c.N}).to(c.low).to(g);
  Tensor res = io16 ? randn({c.M, c.N}).to(c.low).to(g) : Tensor(), add = randn({c.M, c.N}).to(g);
  Tensor w = c.affine ? randn({c.N}).to(g) : Tensor(), b = c.affine ? randn({c.N}).to(g) : Tensor();
  Backend& be = backend_for(g);
  const LayerNormExtras e{.residual = res, .y_dtype = c.low};
  LayerNormOut fast = be.layer_norm(x, w, b, 1e-5, e);
  LayerNormOut slow = be.layer_norm(
      misaligned(x), w, b, 1e-5,
      LayerNormExtras{.residual = io16 ? misaligned(res) : Tensor(), .y_dtype = c.low});
  const double ytol = io16 ? 1.0 / 128 : 1e-5;
  EXPECT_TRUE(all_close(slow.y.to(kCPU), fast.y.to(kCPU), ytol));
  EXPECT_TRUE(all_close(slow.mean.to(kCPU), fast.mean.to(kCPU), 1e-5));
  EXPECT_TRUE(all_close(slow.rstd.to(kCPU), fast.rstd.to(kCPU), 1e-5));
  if (io16) {
    EXPECT_TRUE(all_equal(slow.sum.to(kCPU), fast.sum.to(kCPU)));
  }
  const Tensor xs = io16 ? fast.sum : x;  // what was normalised
  const LayerNormBackwardExtras be_extras{add, io16 ? std::optional<DType>(c.low) : std::nullopt};
  LayerNormGrads f =
      be.layer_norm_backward(dy, xs, w, fast.mean, fast.rstd, c.affine, c.affine, be_extras);
  LayerNormGrads s = be.layer_norm_backward(
      misaligned(dy), misaligned(xs), w, fast.mean, fast.rstd, c.affine, c.affine,
      LayerNormBackwardExtras{misaligned(add), be_extras.grad_input_low});
  EXPECT_TRUE(all_close(s.grad_input.to(kCPU), f.grad_input.to(kCPU), 1e-4));
  if (io16) {
    EXPECT_TRUE(all_equal(f.grad_input_low.to(kCPU), f.grad_input.to(c.low).to(kCPU)));
  }
  if (!c.affine) return;
  const double ctol = 1e-4 * std::sqrt(double(c.M));  // column sums over M rows
  EXPECT_TRUE(all_close(s.grad_weight.to(kCPU), f.grad_weight.to(kCPU), ctol));
  EXPECT_TRUE(all_close(s.grad_bias.to(kCPU), f.grad_bias.to(kCPU), ctol));
  LayerNormGrads again =
      be.layer_norm_backward(dy, xs, w, fast.mean, fast.rstd, true, true, be_extras);
  EXPECT_TRUE(all_equal(f.grad_weight.to(kCPU), again.grad_weight.to(kCPU)));
  EXPECT_TRUE(all_equal(f.grad_bias.to(kCPU), again.grad_bias.to(kCPU)));
}

}  // namespace

TEST(CudaLayerNormRows, MatchesTheGeneralKernelsForEveryWidth) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t N : {4, 128, 132, 256, 260, 512, 516, 768, 772, 1024}) compare({70, N, true, kF32});
}

TEST(CudaLayerNormRows, MatchesAroundTheBackwardsBlocks) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t M : {1, 7, 63, 64, 65, 1000})
    for (bool affine : {false, true}) compare({M, 768, affine, kF32});
}

TEST(CudaLayerNormRows, MatchesWithBfloat16ResidualAndCopies) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (int64_t N : {64, 768}) compare({333, N, true, kBF16});
  compare({16384, 768, true, kBF16});  // GPT-2 124M's rows
}

#endif  // LOOM_WITH_CUDA
