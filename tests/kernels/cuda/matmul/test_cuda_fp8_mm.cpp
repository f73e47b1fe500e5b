// CUDA's fp8_mm (kernels/cuda/matmul/cuda_fp8_mm.cpp: cuBLASLt with FP8 inputs and scale
// pointers) against the CPU's float32 product of the same codes: e4m3 x e4m3, e5m2 x e4m3 and
// e4m3 x e5m2, bfloat16 and float32 outputs, with and without the bias epilogue and the fast
// accumulation; then the refusal of shapes that are not multiples of 16. Skipped without a GPU,
// and on a GPU without FP8 tensor cores (compute capability below 8.9).
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include "core/cuda/device_info.h"
#include "kernels/backend.h"
#include "support/cuda_test_util.h"
#include "support/errors.h"
#include "support/fp8_reference.h"

using namespace loom;
using namespace loom::testing;

namespace {

bool gpu_has_fp8() {
  if (!loom::cuda::is_available()) return false;
  const auto info = loom::cuda::cuda_info();
  return !info.devices.empty() && fp8_supported(info.devices[0].major, info.devices[0].minor);
}

}  // namespace

TEST(CudaFp8Mm, MatchesTheCpuProductOfTheSameCodes) {
  if (!gpu_has_fp8()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores";
  const Device gpu = cuda_device(0);
  Backend &cpu = backend_for(kCPU), &cuda = backend_for(gpu);
  Generator gen(21);
  const int64_t M = 64, N = 96, K = 160;
  Tensor a = randn({M, K}, {}, &gen), b = randn({N, K}, {}, &gen) * 0.02;
  Tensor bias = randn({N}, {}, &gen);
  struct Case {
    Fp8Format fa, fb;
  };
  for (Case c : {Case{Fp8Format::E4M3, Fp8Format::E4M3}, Case{Fp8Format::E5M2, Fp8Format::E4M3},
                 Case{Fp8Format::E4M3, Fp8Format::E5M2}})
    for (DType out : {kBF16, kF32})
      for (bool with_bias : {false, true})
        for (bool fast : {false, true}) {
          SCOPED_TRACE(str(fp8_name(c.fa), " x ", fp8_name(c.fb), " -> ", dtype_name(out),
                           with_bias ? " + bias" : "", fast ? " fast" : ""));
          Fp8Tensor qa = cpu.fp8_quantize(a, c.fa, {}), qb = cpu.fp8_quantize(b, c.fb, {});
          Fp8Tensor ga = cuda.fp8_quantize(a.to(gpu), c.fa, {}),
                    gb = cuda.fp8_quantize(b.to(gpu), c.fb, {});
          const Tensor bc = with_bias ? bias.to(out) : Tensor();
          const Tensor bg = with_bias ? bc.to(gpu) : Tensor();
          // The reference keeps float32 throughout, so its bias is the rounded bias widened back.
          const Tensor bc32 = with_bias ? bc.to(kF32) : Tensor();
          Tensor want = cpu.fp8_mm(fp8_rows(qa), fp8_rows(qb), bc32, kF32, false);
          Tensor got = cuda.fp8_mm(fp8_rows(ga), fp8_rows(gb), bg, out, fast);
          ASSERT_EQ(got.dtype(), out);
          ASSERT_EQ(got.shape(), (Shape{M, N}));
          // Another accumulation order, with fewer than 24 bits between cuBLASLt's promotions to
          // float32 (fewer still with the fast accumulation), and the output's rounding.
          const double tol = (out == kBF16 || fast) ? 2e-2 : 2e-3;
          EXPECT_LT(test::max_abs_diff(got, want), tol * test::max_abs(want));
        }
}

TEST(CudaFp8Mm, RefusesShapesThatAreNotMultiplesOf16) {
  if (!gpu_has_fp8()) GTEST_SKIP() << "no CUDA device with FP8 tensor cores";
  const Device gpu = cuda_device(0);
  Backend& cuda = backend_for(gpu);
  Fp8Tensor a = cuda.fp8_quantize(ones({24, 32}, {.device = gpu}), Fp8Format::E4M3, {});
  Fp8Tensor b = cuda.fp8_quantize(ones({32, 32}, {.device = gpu}), Fp8Format::E4M3, {});
  test::expect_error([&] { cuda.fp8_mm(fp8_rows(a), fp8_rows(b), Tensor(), kBF16, false); },
                     {"fp8_mm", "multiples of 16"});
}

#endif  // LOOM_WITH_CUDA
