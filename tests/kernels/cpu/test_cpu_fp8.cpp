// The CPU backend's FP8 methods (kernels/cpu/cpu_fp8.cpp): amax, the codes of fp8_quantize in
// both layouts against the reference encoder element by element, and fp8_mm against the float64
// product of the dequantised codes; and fp8_mm's refusals.
#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "support/errors.h"
#include "support/fp8_reference.h"

using namespace loom;

TEST(CpuFp8, QuantizeWritesTheReferenceCodesInBothLayouts) {
  Generator gen(7);
  Backend& be = backend_for(kCPU);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (DType dt : {kF32, kBF16}) {
      SCOPED_TRACE(str(fp8_name(f), " from ", dtype_name(dt)));
      Tensor x = (randn({19, 33}, {}, &gen) * 3.0).to(dt);
      Fp8Tensor q = be.fp8_quantize(x, f, {.rows = true, .transposed = true});
      test::Fp8Reference ref = test::fp8_reference(x, f);
      EXPECT_EQ(q.amax.item(), double(ref.amax));
      EXPECT_EQ(q.scale.item(), double(ref.scale));
      EXPECT_EQ(q.inv_scale.item(), double(ref.inv_scale));
      ASSERT_EQ(q.bits.shape(), (Shape{19, 33}));
      ASSERT_EQ(q.bits_t.shape(), (Shape{33, 19}));
      EXPECT_EQ(q.bits.to_vector<uint8_t>(), ref.codes);
      EXPECT_EQ(q.bits_t.t().contiguous().to_vector<uint8_t>(), ref.codes);
      EXPECT_EQ(max(abs(x.to(kF32))).item(), q.amax.item());
    }
}

TEST(CpuFp8, AnAllZeroTensorHasScaleOne) {
  Fp8Tensor q = backend_for(kCPU).fp8_quantize(zeros({4, 16}), Fp8Format::E4M3, {});
  EXPECT_EQ(q.scale.item(), 1.0);
  EXPECT_EQ(q.amax.item(), 0.0);
  EXPECT_FALSE(q.bits_t.defined());
  for (uint8_t c : q.bits.to_vector<uint8_t>()) EXPECT_EQ(c, 0);
}

TEST(CpuFp8, MmIsTheFloat64ProductOfTheDequantisedCodes) {
  Generator gen(8);
  Backend& be = backend_for(kCPU);
  const int64_t M = 24, N = 40, K = 48;
  Tensor a = randn({M, K}, {}, &gen), b = randn({N, K}, {}, &gen) * 0.05,
         bias = randn({N}, {}, &gen);
  for (Fp8Format fb : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    SCOPED_TRACE(fp8_name(fb));
    Fp8Tensor qa = be.fp8_quantize(a, Fp8Format::E4M3, {}), qb = be.fp8_quantize(b, fb, {});
    Tensor want = mm(test::fp8_reference(a, Fp8Format::E4M3).dequantized,
                     test::fp8_reference(b, fb).dequantized.t());  // (M, N) float64
    Tensor y = be.fp8_mm(fp8_rows(qa), fp8_rows(qb), Tensor(), kF32, false);
    ASSERT_EQ(y.dtype(), kF32);
    EXPECT_LT(test::max_abs_diff(y, want), 1e-5 * test::max_abs(want));
    Tensor yb = be.fp8_mm(fp8_rows(qa), fp8_rows(qb), bias.to(kBF16), kBF16, true);
    ASSERT_EQ(yb.dtype(), kBF16);
    Tensor want_b = want + bias.to(kBF16).to(kF64);
    EXPECT_LT(test::max_abs_diff(yb, want_b), 1e-2 * test::max_abs(want_b));
  }
}

TEST(CpuFp8, MmRefusesE5M2TimesE5M2AndMismatchedShapes) {
  Backend& be = backend_for(kCPU);
  Fp8Tensor g = be.fp8_quantize(ones({16, 32}), Fp8Format::E5M2, {});
  Fp8Tensor w = be.fp8_quantize(ones({16, 48}), Fp8Format::E4M3, {});
  EXPECT_NE(test::error_of([&] {
              be.fp8_mm(fp8_rows(g), fp8_rows(g), Tensor(), kF32, false);
            }).find("e5m2 x e5m2 is not supported"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              be.fp8_mm(fp8_rows(g), fp8_rows(w), Tensor(), kF32, false);
            }).find("one K"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              be.fp8_mm(fp8_rows(w), fp8_rows(w), Tensor(), kF16, false);
            }).find("expected bfloat16 or float32"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { fp8_columns(w); }).find("without its transposed layout"),
            std::string::npos);
}
