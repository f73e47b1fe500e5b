// The host side of kernels/fp8.h: the reference encode and decode of E4M3 and E5M2 written from
// the formats' definitions (Note [FP8 formats] in kernels/fp8.h), and the capability check.
// Leaves out: fast paths (a 256-entry decode table, bit tricks): this is the readable oracle.
#include "kernels/fp8.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace loom {

namespace {

// The parameters of one format.
struct Fp8Spec {
  int exponent_bits, mantissa_bits, bias;
  double max;
};

Fp8Spec spec_of(Fp8Format f) {
  return f == Fp8Format::E4M3 ? Fp8Spec{4, 3, 7, 448.0} : Fp8Spec{5, 2, 15, 57344.0};
}

}  // namespace

double fp8_max(Fp8Format f) { return spec_of(f).max; }

const char* fp8_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

// The magnitude is clamped to the largest finite value (saturation), then rounded to a multiple
// of the quantum of its binade, 2^(E - mantissa_bits), E its exponent (never below the smallest
// normal's: subnormals share that quantum). a / quantum is exact in double, and nearbyint rounds
// it to the nearest integer, ties to even. A count of 2^(mantissa_bits + 1) quanta is the next
// binade's first value, which the field arithmetic below carries into the exponent.
uint8_t fp8_encode(float x, Fp8Format f) {
  const Fp8Spec s = spec_of(f);
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::min(std::fabs(double(x)), s.max);
  if (a == 0.0) return sign;
  const int min_exp = 1 - s.bias;  // the smallest normal is 2^min_exp
  const int e = std::max(std::ilogb(a), min_exp);
  const double quantum = std::ldexp(1.0, e - s.mantissa_bits);
  const int64_t q = int64_t(std::nearbyint(a / quantum));  // quanta, 0 .. 2^(m + 1)
  if (q == 0) return sign;                                 // underflow to zero
  // q = 2^m (1 + frac) in a normal binade: exponent field e + bias, mantissa q - 2^m. In the
  // subnormal binade q < 2^m and the exponent field is 0. q = 2^(m + 1) carries: q - 2^m = 2^m
  // overflows the mantissa field into the exponent by one, which the addition does for us.
  const int64_t one = int64_t(1) << s.mantissa_bits;
  const int64_t exponent_field = q < one ? 0 : e + s.bias;
  const int64_t code = (exponent_field << s.mantissa_bits) + (q < one ? q : q - one);
  return uint8_t(sign | uint8_t(code));
}

float fp8_decode(uint8_t bits, Fp8Format f) {
  const Fp8Spec s = spec_of(f);
  const bool negative = (bits & 0x80) != 0;
  const int exponent_field = (bits & 0x7f) >> s.mantissa_bits;
  const int mantissa = bits & ((1 << s.mantissa_bits) - 1);
  const int all_ones = (1 << s.exponent_bits) - 1;
  double v = 0.0;
  if (f == Fp8Format::E4M3 && exponent_field == all_ones && mantissa == 7) {
    v = std::nan("");
  } else if (f == Fp8Format::E5M2 && exponent_field == all_ones) {
    v = mantissa == 0 ? INFINITY : std::nan("");
  } else if (exponent_field == 0) {  // subnormal: mantissa quanta of the smallest binade
    v = std::ldexp(double(mantissa), 1 - s.bias - s.mantissa_bits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(double(mantissa), -s.mantissa_bits), exponent_field - s.bias);
  }
  return float(negative ? -v : v);
}

Fp8Operand fp8_rows(const Fp8Tensor& t) {
  LOOM_CHECK(t.bits.defined(), "fp8: the ", fp8_name(t.format),
             " tensor was quantised without its row layout");
  return {t.bits, t.inv_scale, t.format};
}

Fp8Operand fp8_columns(const Fp8Tensor& t) {
  LOOM_CHECK(t.bits_t.defined(), "fp8: the ", fp8_name(t.format),
             " tensor was quantised without its transposed layout");
  return {t.bits_t, t.inv_scale, t.format};
}

void check_fp8_input(const char* op, const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 2 && x.is_contiguous() && is_floating(x.dtype()), op,
             ": expected a contiguous 2-d floating tensor, got ",
             x.defined() ? describe(x) : std::string("undefined"));
}

namespace {

void check_operand(const char* which, const Fp8Operand& t, const Device& dev) {
  LOOM_CHECK(t.bits.defined() && t.bits.dim() == 2 && t.bits.dtype() == DType::U8 &&
                 t.bits.is_contiguous() && t.bits.device() == dev,
             "fp8_mm: ", which, " must be contiguous 2-d uint8 codes on ", dev, ", got ",
             t.bits.defined() ? describe(t.bits) : std::string("undefined"));
  LOOM_CHECK(t.inv_scale.defined() && t.inv_scale.numel() == 1 &&
                 t.inv_scale.dtype() == DType::F32 && t.inv_scale.device() == dev,
             "fp8_mm: ", which, "'s inverse scale must be one float32 on ", dev, ", got ",
             t.inv_scale.defined() ? describe(t.inv_scale) : std::string("undefined"));
}

}  // namespace

void check_fp8_mm_args(const Fp8Operand& a, const Fp8Operand& b, const Tensor& bias,
                       DType out_dtype) {
  LOOM_CHECK(a.bits.defined(), "fp8_mm: a is undefined");
  const Device dev = a.bits.device();
  check_operand("a", a, dev);
  check_operand("b", b, dev);
  LOOM_CHECK(a.bits.size(1) == b.bits.size(1), "fp8_mm: a ", a.bits.shape(), " and b ",
             b.bits.shape(), " must both be (rows, K) with one K");
  LOOM_CHECK(a.format == Fp8Format::E4M3 || b.format == Fp8Format::E4M3,
             "fp8_mm: e5m2 x e5m2 is not supported (cuBLASLt has no such product); quantise one "
             "factor to e4m3");
  LOOM_CHECK(out_dtype == DType::BF16 || out_dtype == DType::F32, "fp8_mm: out_dtype ",
             dtype_name(out_dtype), " is not supported (expected bfloat16 or float32)");
  LOOM_CHECK(!bias.defined() ||
                 (bias.dim() == 1 && bias.size(0) == b.bits.size(0) && bias.dtype() == out_dtype &&
                  bias.is_contiguous() && bias.device() == dev),
             "fp8_mm: bias ", bias.defined() ? describe(bias) : std::string(), " must be (",
             b.bits.size(0), ") contiguous in ", dtype_name(out_dtype), " on ", dev);
}

bool fp8_supported(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

void check_fp8_capability(const char* op, const std::string& device, int major, int minor) {
  LOOM_CHECK(fp8_supported(major, minor), op, ": FP8 matrix products need a GPU of compute ",
             "capability 8.9 or higher (Ada, Hopper and later); ", device, " has compute ",
             "capability ", major, ".", minor, " (train with --amp bf16 there)");
}

}  // namespace loom
