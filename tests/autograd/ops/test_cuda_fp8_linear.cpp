// fp8_linear on CUDA (the quantisation kernels and cuBLASLt's FP8 products) against the same op on
// the CPU (the emulated recipe, itself tested against float64 in test_fp8_linear.cpp) under bf16
// autocast, as --amp fp8 runs it: forward, and the input, weight and bias gradients. The codes are
// the same bit for bit on both devices (tests/kernels/cuda/fp8/test_cuda_fp8.cpp), so the
// differences are the GEMMs' accumulation order and the bfloat16 outputs. Skipped without a GPU,
// and on a GPU without FP8 tensor cores.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include "autograd/amp/autocast.h"
#include "autograd/ops/fp8_linear.h"
#include "core/cuda/device_info.h"
#include "support/cuda_test_util.h"
#include "support/fp8_reference.h"

using namespace loom;
using namespace loom::testing;

namespace {

struct Grads3 {
  Tensor y, dx, dw, db;
};

// y = fp8_linear(x, w, b) under bf16 autocast on `dev`, and the gradients of sum(y * g).
Grads3 run(const Device& dev, const Tensor& x0, const Tensor& w0, const Tensor& b0,
           const Tensor& g) {
  Tensor x = x0.to(dev).detach().requires_grad_(), w = w0.to(dev).detach().requires_grad_(),
         b = b0.to(dev).detach().requires_grad_();
  Tensor y;
  {
    amp::Autocast autocast(kBF16);
    y = fp8_linear(x, w, b);
  }
  (y.to(kF32) * g.to(dev)).sum().backward();
  return {y, x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST(CudaFp8Linear, ForwardAndBackwardMatchTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto info = loom::cuda::cuda_info();
  if (info.devices.empty() || !fp8_supported(info.devices[0].major, info.devices[0].minor))
    GTEST_SKIP() << "no FP8 tensor cores";
  Generator gen(9);
  const int64_t B = 4, T = 32, K = 96, N = 128;  // M = 128 rows
  Tensor x = randn({B, T, K}, {}, &gen).to(kBF16), w = randn({N, K}, {}, &gen) * 0.05,
         b = randn({N}, {}, &gen), g = randn({B, T, N}, {}, &gen) * 1e-3;
  Grads3 cpu = run(kCPU, x, w, b, g), gpu = run(cuda_device(0), x, w, b, g);
  ASSERT_EQ(gpu.y.dtype(), kBF16);
  ASSERT_EQ(gpu.dx.dtype(), kBF16);
  ASSERT_EQ(gpu.dw.dtype(), kF32);
  ASSERT_EQ(gpu.y.shape(), (Shape{B, T, N}));
  // bfloat16 outputs (y, dx) and the bias's bfloat16 row sums: a few bfloat16 units; dW (float32)
  // only the accumulation: Hopper's FP8 tensor cores keep fewer than 24 bits between cuBLASLt's
  // promotions to float32.
  EXPECT_LT(test::max_abs_diff(gpu.y, cpu.y), 2e-2 * test::max_abs(cpu.y));
  EXPECT_LT(test::max_abs_diff(gpu.dx, cpu.dx), 2e-2 * test::max_abs(cpu.dx));
  EXPECT_LT(test::max_abs_diff(gpu.dw, cpu.dw), 2e-3 * test::max_abs(cpu.dw));
  EXPECT_LT(test::max_abs_diff(gpu.db, cpu.db), 2e-2 * test::max_abs(cpu.db));
}

#endif  // LOOM_WITH_CUDA
