// CUDA FP8 quantisation (kernels/cuda/fp8/cuda_fp8.cu) against the CPU backend's reference: amax
// equal, scale and inverse scale equal, and every code equal bit for bit in both layouts, for the
// tiled cast kernel and the naive one, float32 and bfloat16 inputs, both formats, shapes that are
// and are not multiples of the 32 x 32 tile, values spread over many binades (subnormal codes and
// ties included). Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "kernels/cuda/launch.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// (R, C) values over about 20 binades: x * e^(2.77 n) = x * 2^(4 n), n standard normal.
Tensor spread(int64_t R, int64_t C, DType dt, uint64_t seed) {
  Generator gen(seed);
  return (randn({R, C}, {}, &gen) * exp(randn({R, C}, {}, &gen) * 2.77)).to(dt);
}

}  // namespace

TEST(CudaFp8, AmaxEqualsTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = cuda_device(0);
  for (DType dt : {kF32, kBF16})
    for (Shape s : {Shape{1, 1}, Shape{37, 129}, Shape{1024, 768}}) {
      Tensor x = spread(s[0], s[1], dt, 1);
      EXPECT_EQ(backend_for(gpu).fp8_amax(x.to(gpu)).item(), backend_for(kCPU).fp8_amax(x).item())
          << dtype_name(dt) << " " << str(s);
    }
  EXPECT_EQ(backend_for(gpu).fp8_amax(zeros({16, 16}, {.device = gpu})).item(), 0.0);
}

TEST(CudaFp8, QuantizeEqualsTheCpuBitForBit) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = cuda_device(0);
  Backend &cpu = backend_for(kCPU), &cuda = backend_for(gpu);
  for (bool naive : {false, true})
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
      for (DType dt : {kF32, kBF16})
        for (Shape s : {Shape{64, 96}, Shape{37, 129}, Shape{1, 300}, Shape{256, 2304}}) {
          SCOPED_TRACE(
              str(naive ? "naive " : "tiled ", fp8_name(f), " ", dtype_name(dt), " ", str(s)));
          cuda::set_use_naive_kernels(naive);
          Tensor x = spread(s[0], s[1], dt, uint64_t(s[0] * s[1]));
          Fp8Tensor want = cpu.fp8_quantize(x, f, {.rows = true, .transposed = true});
          Fp8Tensor got = cuda.fp8_quantize(x.to(gpu), f, {.rows = true, .transposed = true});
          EXPECT_EQ(got.amax.item(), want.amax.item());
          EXPECT_EQ(got.scale.item(), want.scale.item());
          EXPECT_EQ(got.inv_scale.item(), want.inv_scale.item());
          EXPECT_EQ(got.bits.to_vector<uint8_t>(), want.bits.to_vector<uint8_t>());
          EXPECT_EQ(got.bits_t.to_vector<uint8_t>(), want.bits_t.to_vector<uint8_t>());
          Fp8Tensor only_t = cuda.fp8_quantize(x.to(gpu), f, {.rows = false, .transposed = true});
          EXPECT_FALSE(only_t.bits.defined());
          EXPECT_EQ(only_t.bits_t.to_vector<uint8_t>(), want.bits_t.to_vector<uint8_t>());
        }
  cuda::set_use_naive_kernels(false);
}

#endif  // LOOM_WITH_CUDA
