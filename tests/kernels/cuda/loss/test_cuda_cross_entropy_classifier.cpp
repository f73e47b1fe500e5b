// The classifier on CUDA (Note [The classifier in one node] in autograd/ops/linalg.cpp):
// cross_entropy_with_grad_'s one-pass kernel (Note [Cross-entropy and its gradient in one pass])
// against the forward and backward kernels composed, for GPT-2's bfloat16 vocabulary, float32
// rows of every width the kernel takes, ignored rows and label smoothing; linear_cross_entropy
// under bf16 autocast, in one chunk of rows and in three, against the CPU's float32 composite;
// scale_by_ on 16-bit tensors against the CPU bit for bit.
#include <gtest/gtest.h>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {
const Device kGpu = cuda_device(0);
}  // namespace

TEST(CudaLinearCrossEntropy, OnePassKernelMatchesTheTwoKernels) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(31);
  struct Case {
    DType dt;
    int64_t N, C;
  };
  // bf16: GPT-2's padded vocabulary and a one-warp row; f32: 4 a pack, the widest row that fits.
  for (Case c :
       {Case{kBF16, 70, 50304}, Case{kBF16, 9, 256}, Case{kF32, 33, 1000}, Case{kF32, 5, 32768}})
    for (double ls : {0.0, 0.1}) {
      SCOPED_TRACE(str(dtype_name(c.dt), " C ", c.C, " ls ", ls));
      Tensor logits = (randn({c.N, c.C}, {}, &gen) * 3.0).to(c.dt).to(kGpu);
      Tensor target = randint(0, c.C, {c.N}, {.dtype = kI64}, &gen);
      target.data<int64_t>()[2] = -100;
      target = target.to(kGpu);
      Backend& be = backend_for(kGpu);
      Tensor a = logits.clone(), b = logits.clone();
      CrossEntropyOut one = be.cross_entropy_with_grad_(a, target, Reduction::Mean, ls, -100);
      CrossEntropyOut two =
          cross_entropy_with_grad_composed(be, b, target, Reduction::Mean, ls, -100);
      EXPECT_TRUE(all_close(two.loss.to(kCPU), one.loss.to(kCPU), 1e-5));
      EXPECT_TRUE(all_close(two.lse.to(kCPU), one.lse.to(kCPU), 1e-5));
      EXPECT_EQ(one.scale.to(kCPU).item(), 1.0 / double(c.N - 1));
      // The gradients: bfloat16 rounding of values below 1 (the sums' order differs).
      const double tol = c.dt == kBF16 ? 4e-3 : 1e-6;
      EXPECT_TRUE(all_close(b.to(kF32).to(kCPU), a.to(kF32).to(kCPU), tol));
      EXPECT_EQ(max(abs(a.select(0, 2).to(kF32))).item(), 0.0) << "the ignored row is zeros";
      EXPECT_FALSE(all_close(logits.to(kF32).to(kCPU), a.to(kF32).to(kCPU), 1e-3))
          << "the logits must have been overwritten";
    }
}

TEST(CudaLinearCrossEntropy, MatchesTheCpuUnderAutocast) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(32);
  const int64_t M = 96, K = 64, V = 2048;
  Tensor x = randn({2, M / 2, K}, {}, &gen), w = randn({V, K}, {}, &gen) * 0.2;
  Tensor target = randint(0, V, {2, M / 2}, {.dtype = kI64}, &gen);
  target.data<int64_t>()[7] = -1;
  auto run = [&](Device dev, int64_t chunk_rows) {
    Tensor xl = x.to(dev).detach().requires_grad_(true);
    Tensor wl = w.to(dev).detach().requires_grad_(true);
    Tensor loss;
    {
      std::optional<amp::Autocast> ac;
      if (dev.is_cuda()) ac.emplace(kBF16);
      loss = linear_cross_entropy(xl, wl, target.to(dev), Reduction::Mean, 0.0, -1, chunk_rows);
    }
    loss.backward(full({}, 0.5, {.device = dev}));
    return std::make_tuple(loss.detach().to(kCPU), xl.grad().to(kCPU), wl.grad().to(kCPU));
  };
  auto [lc, dxc, dwc] = run(kCPU, 0);
  // One chunk, and three (40, 40 and 16 rows: Note [The classifier in chunks]).
  for (int64_t chunk_rows : {int64_t(0), int64_t(40)}) {
    SCOPED_TRACE(str("chunk_rows ", chunk_rows));
    auto [lg, dxg, dwg] = run(kGpu, chunk_rows);
    EXPECT_EQ(lg.dtype(), kF32);
    EXPECT_EQ(dwg.dtype(), kF32) << "the weight's gradient from the GEMM in float32";
    EXPECT_NEAR(lg.item(), lc.item(), 2e-2 * lc.item());
    // bfloat16 inputs and gradients: a few 2^-8 relative of the largest entries.
    const double sx = max(abs(dxc)).item(), sw = max(abs(dwc)).item();
    EXPECT_TRUE(all_close(dxc, dxg, 3e-2 * sx));
    EXPECT_TRUE(all_close(dwc, dwg, 3e-2 * sw));
  }
}

TEST(CudaLinearCrossEntropy, ScaleBySixteenBitMatchesTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(33);
  for (DType dt : {kBF16, kF16}) {
    Tensor c = randn({10007}, {}, &gen).to(dt), g = c.to(kGpu);
    Tensor f = full({}, 0.3);
    backend_for(kCPU).scale_by_({c}, f);
    backend_for(kGpu).scale_by_({g}, f.to(kGpu));
    EXPECT_TRUE(all_equal(c, g.to(kCPU))) << dtype_name(dt);
  }
}
