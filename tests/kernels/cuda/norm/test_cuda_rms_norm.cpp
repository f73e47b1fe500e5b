// CUDA RMS norm (kernels/cuda/norm/cuda_rms_norm.cu): the fast path (Note [RMS norm, a row in
// registers] in kernels/cuda/norm/cuda_rms_norm_rows.cu) against the general kernels on the same
// GPU (the same rows once in aligned memory, once one element off, which the fast path declines),
// and both against the CPU's loops (kernels/cpu/cpu_rms_norm.cpp): every register width of a warp
// per row and of a block per row (N = 4 ... 8192), row counts around the backward's 64- and
// 16-row blocks, odd and too-wide rows (general only), float32, bfloat16 and float16 x with a
// weight of x's dtype, a float32 weight or none, float64 x; grad_weight bit-identical run to run.
// Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/backend.h"
#include "kernels/raw_ops.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// t's values in GPU memory one element past an aligned start: contiguous, but the fast path will
// not take it.
Tensor misaligned(const Tensor& t) {
  Tensor flat = empty({t.numel() + 1}, {.dtype = t.dtype(), .device = cuda_device(0)});
  Tensor v = raw::view(raw::slice(flat, 0, 1, t.numel() + 1, 1), t.shape());
  v.copy_(t.to(cuda_device(0)));
  return v;
}

struct Case {
  int64_t M, N;
  DType x, w;  // w: the weight's dtype; Bool for no weight
};

std::string name(const Case& c) {
  return str(c.M, " x ", c.N, " x ", dtype_name(c.x), " w ",
             c.w == kBool ? "none" : dtype_name(c.w));
}

double tol_of(DType d) { return d == kF64 ? 1e-12 : d == kF32 ? 2e-5 : d == kBF16 ? 1.6e-2 : 2e-3; }

// Forward and backward by the given tensors' paths on the GPU, and by the CPU.
void compare(const Case& c) {
  SCOPED_TRACE(name(c));
  manual_seed(uint64_t(c.M * 131 + c.N));
  const Device g = cuda_device(0);
  const bool has_w = c.w != kBool;
  const DType yd = has_w ? c.w : c.x;
  Tensor x = (randn({c.M, c.N}) * 2.0).to(c.x), dy = randn({c.M, c.N}).to(yd);
  Tensor w = has_w ? (randn({c.N}) + 1.0).to(c.w) : Tensor();
  Backend &gpu = backend_for(g), &cpu = backend_for(kCPU);
  Tensor wg = has_w ? w.to(g) : Tensor();
  RmsNormOut fast = gpu.rms_norm(x.to(g), wg, 1e-5), slow = gpu.rms_norm(misaligned(x), wg, 1e-5);
  RmsNormOut want = cpu.rms_norm(x, w, 1e-5);
  const double t = std::max(tol_of(c.x), tol_of(yd));
  EXPECT_EQ(fast.y.dtype(), yd);
  EXPECT_TRUE(all_close(slow.y.to(kCPU), fast.y.to(kCPU), t)) << "fast against general: y";
  EXPECT_TRUE(all_close(want.y, fast.y.to(kCPU), t)) << "against the CPU: y";
  EXPECT_TRUE(all_close(want.rstd, fast.rstd.to(kCPU), 1e-5)) << "rstd";
  RmsNormGrads f = gpu.rms_norm_backward(dy.to(g), x.to(g), wg, fast.rstd, has_w);
  RmsNormGrads s = gpu.rms_norm_backward(misaligned(dy), misaligned(x), wg, fast.rstd, has_w);
  RmsNormGrads r = cpu.rms_norm_backward(dy, x, w, want.rstd, has_w);
  EXPECT_TRUE(all_close(s.grad_input.to(kCPU), f.grad_input.to(kCPU), t)) << "dx fast/general";
  EXPECT_TRUE(all_close(r.grad_input, f.grad_input.to(kCPU), t)) << "dx against the CPU";
  if (!has_w) return;
  const double ct = t * std::sqrt(double(c.M));  // a sum over M rows
  EXPECT_TRUE(all_close(s.grad_weight.to(kCPU), f.grad_weight.to(kCPU), ct)) << "dw fast/general";
  EXPECT_TRUE(all_close(r.grad_weight, f.grad_weight.to(kCPU), ct)) << "dw against the CPU";
  RmsNormGrads again = gpu.rms_norm_backward(dy.to(g), x.to(g), wg, fast.rstd, true);
  EXPECT_TRUE(all_equal(f.grad_weight.to(kCPU), again.grad_weight.to(kCPU))) << "deterministic";
}

}  // namespace

TEST(CudaRmsNorm, FastPathAndGeneralKernelsMatchEachOtherAndTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // A warp per row: V = 1, 2, 4, 8 (N <= 128, 256, 512, 1024); a block per row: V = 2, 4, 8.
  for (int64_t N : {4, 100, 256, 508, 1024, 2048, 3072, 4096, 8192})
    for (int64_t M : {1, 17, 65, 130}) compare({M, N, kF32, kF32});
  for (DType x : {kBF16, kF16})
    for (DType w : {x, kF32, kBool})
      for (int64_t N : {64, 1000, 2048, 4096}) compare({33, N, x, w});
  // Rows only the general kernels take: N odd, N > 8192, float64.
  for (int64_t N : {7, 8196}) compare({9, N, kBF16, kF32});
  compare({20, 96, kF64, kF64});
}

#endif  // LOOM_WITH_CUDA
