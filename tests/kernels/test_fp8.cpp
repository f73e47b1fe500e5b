// The reference FP8 conversions of kernels/fp8.h against values worked out by hand from the
// formats' definitions (Note [FP8 formats]), against a brute-force nearest-value search over all
// 256 codes, and the capability check's refusal through a fake compute capability.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/fp8.h"

using namespace loom;

namespace {

constexpr Fp8Format E4M3 = Fp8Format::E4M3, E5M2 = Fp8Format::E5M2;
constexpr float kInf = std::numeric_limits<float>::infinity();

// The code nearest to x among the finite codes (ties: the even code, whose last mantissa bit is
// 0), x first clamped to the largest finite value: the rule written as a search.
uint8_t nearest_by_search(float x, Fp8Format f) {
  const double max = fp8_max(f);
  const double a = std::min(std::fabs(double(x)), max);
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 128; ++c) {
    const float v = fp8_decode(uint8_t(c), f);
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(double(v) - a);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}

}  // namespace

TEST(Fp8, E4M3HandValues) {
  EXPECT_EQ(fp8_encode(1.0f, E4M3), 0x38);          // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(fp8_encode(-2.0f, E4M3), 0xc0);         // sign, exponent 8
  EXPECT_EQ(fp8_encode(448.0f, E4M3), 0x7e);        // 1.75 * 2^8: the largest finite value
  EXPECT_EQ(fp8_encode(0.015625f, E4M3), 0x08);     // 2^-6: the smallest normal
  EXPECT_EQ(fp8_encode(0.001953125f, E4M3), 0x01);  // 2^-9: the smallest subnormal
  EXPECT_EQ(fp8_encode(0.005859375f, E4M3), 0x03);  // 3 * 2^-9
  EXPECT_EQ(fp8_encode(0.0f, E4M3), 0x00);
  EXPECT_EQ(fp8_encode(-0.0f, E4M3), 0x80);
  EXPECT_FLOAT_EQ(fp8_decode(0x7e, E4M3), 448.0f);
  EXPECT_FLOAT_EQ(fp8_decode(0x01, E4M3), 0.001953125f);
  EXPECT_FLOAT_EQ(fp8_decode(0x3a, E4M3), 1.25f);
  EXPECT_FLOAT_EQ(fp8_decode(0xbf, E4M3), -1.875f);
}

TEST(Fp8, E4M3RoundsToNearestTiesToEven) {
  EXPECT_EQ(fp8_encode(1.0625f, E4M3), 0x38);  // halfway 1.0 (even) / 1.125: down
  EXPECT_EQ(fp8_encode(1.1875f, E4M3), 0x3a);  // halfway 1.125 / 1.25 (even): up
  EXPECT_EQ(fp8_encode(1.07f, E4M3), 0x39);    // past halfway: 1.125
  EXPECT_EQ(fp8_encode(15.5f, E4M3), 0x58);    // halfway 15 / 16 (even): up into the next binade
  EXPECT_EQ(fp8_encode(0.0009765625f, E4M3), 0x00);  // half the smallest subnormal: to zero (even)
  EXPECT_EQ(fp8_encode(0.0029296875f, E4M3), 0x02);  // 1.5 subnormal quanta: to 2 (even)
  EXPECT_EQ(fp8_encode(-0.0001f, E4M3), 0x80);       // underflow keeps the sign
}

TEST(Fp8, E4M3SaturatesAndHasNoInfinity) {
  EXPECT_EQ(fp8_encode(464.0f, E4M3), 0x7e);  // halfway 448 / (480 would be NaN): 448
  EXPECT_EQ(fp8_encode(500.0f, E4M3), 0x7e);
  EXPECT_EQ(fp8_encode(1e30f, E4M3), 0x7e);
  EXPECT_EQ(fp8_encode(kInf, E4M3), 0x7e);
  EXPECT_EQ(fp8_encode(-kInf, E4M3), 0xfe);
  EXPECT_EQ(fp8_encode(std::nanf(""), E4M3), 0x7f);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7f, E4M3)));
  EXPECT_TRUE(std::isnan(fp8_decode(0xff, E4M3)));
  EXPECT_FLOAT_EQ(fp8_decode(0x78, E4M3), 256.0f);  // exponent 15 is a normal binade in E4M3
}

TEST(Fp8, E5M2HandValues) {
  EXPECT_EQ(fp8_encode(1.0f, E5M2), 0x3c);                // exponent 15 (bias 15)
  EXPECT_EQ(fp8_encode(57344.0f, E5M2), 0x7b);            // 1.75 * 2^15: the largest finite
  EXPECT_EQ(fp8_encode(6.103515625e-05f, E5M2), 0x04);    // 2^-14: the smallest normal
  EXPECT_EQ(fp8_encode(1.52587890625e-05f, E5M2), 0x01);  // 2^-16: the smallest subnormal
  EXPECT_EQ(fp8_encode(1.125f, E5M2), 0x3c);              // halfway 1.0 (even) / 1.25: down
  EXPECT_EQ(fp8_encode(1.375f, E5M2), 0x3e);              // halfway 1.25 / 1.5 (even): up
  EXPECT_EQ(fp8_encode(60000.0f, E5M2), 0x7b);            // saturates, never infinity
  EXPECT_EQ(fp8_encode(kInf, E5M2), 0x7b);
  EXPECT_EQ(fp8_encode(-kInf, E5M2), 0xfb);
  EXPECT_EQ(fp8_encode(std::nanf(""), E5M2), 0x7f);
  EXPECT_EQ(fp8_decode(0x7c, E5M2), kInf);
  EXPECT_EQ(fp8_decode(0xfc, E5M2), -kInf);
  EXPECT_TRUE(std::isnan(fp8_decode(0x7d, E5M2)));
  EXPECT_FLOAT_EQ(fp8_decode(0x01, E5M2), 1.52587890625e-05f);
  EXPECT_FLOAT_EQ(fp8_decode(0xc7, E5M2), -7.0f);
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (Fp8Format f : {E4M3, E5M2})
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_decode(uint8_t(c), f);
      if (std::isfinite(v)) {
        EXPECT_EQ(fp8_encode(v, f), c) << fp8_name(f) << " code " << c;
      }
    }
}

TEST(Fp8, EncodeIsTheNearestCodeBySearch) {
  std::mt19937 rng(3);
  for (Fp8Format f : {E4M3, E5M2}) {
    std::uniform_real_distribution<float> exponent(-20.0f, 18.0f);
    for (int i = 0; i < 20000; ++i) {
      float x = std::exp2(exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
      ASSERT_EQ(fp8_encode(x, f), nearest_by_search(x, f)) << fp8_name(f) << " x = " << x;
    }
    // Every midpoint between neighbouring codes: the ties.
    for (int c = 0; c < 0x7e; ++c) {
      const float lo = fp8_decode(uint8_t(c), f), hi = fp8_decode(uint8_t(c + 1), f);
      if (!std::isfinite(hi)) continue;
      const float mid = 0.5f * (lo + hi);
      ASSERT_EQ(fp8_encode(mid, f), nearest_by_search(mid, f)) << fp8_name(f) << " mid " << mid;
    }
  }
}

TEST(Fp8, ScaleFillsTheRange) {
  EXPECT_EQ(fp8_scale(0.0f, 448.0f), 1.0f);  // an all-zero tensor
  EXPECT_EQ(fp8_scale(2.0f, 448.0f), 224.0f);
  EXPECT_EQ(fp8_scale(1e-20f, 448.0f), 448.0f / 1e-12f);  // amax floored at 1e-12
  EXPECT_EQ(fp8_scale(4.0f, 57344.0f), 14336.0f);
}

TEST(Fp8, CapabilityCheckRefusesGpusWithoutFp8) {
  EXPECT_TRUE(fp8_supported(9, 0));   // H100, H200
  EXPECT_TRUE(fp8_supported(8, 9));   // Ada
  EXPECT_TRUE(fp8_supported(10, 0));  // Blackwell
  EXPECT_FALSE(fp8_supported(8, 6));
  EXPECT_FALSE(fp8_supported(8, 0));  // A100
  EXPECT_NO_THROW(check_fp8_capability("fp8_mm", "cuda:0 (NVIDIA H200)", 9, 0));
  try {
    check_fp8_capability("fp8_mm", "cuda:1 (NVIDIA A100-SXM4-80GB)", 8, 0);
    FAIL() << "expected a refusal";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fp8_mm"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:1 (NVIDIA A100-SXM4-80GB)"), std::string::npos) << m;
    EXPECT_NE(m.find("compute capability 8.0"), std::string::npos) << m;
    EXPECT_NE(m.find("8.9"), std::string::npos) << m;
  }
}
