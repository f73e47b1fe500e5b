// Half (IEEE fp16) and BFloat16 storage types with float conversion, usable on host and device.
// Leaves out: arithmetic on the 16-bit types themselves; kernels convert to float, compute, and
// convert back (see kernels/functors.h: acc_t).
#pragma once

#include <bit>
#include <cstdint>

#include "core/macros.h"

namespace loom {

namespace detail {
// The bits of a float32 and back: std::bit_cast, a constexpr host function that device code may
// call (--expt-relaxed-constexpr; the same instructions as __float_as_uint / __uint_as_float).
LOOM_HOST_DEVICE inline uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
LOOM_HOST_DEVICE inline float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }
}  // namespace detail

// bfloat16: the top 16 bits of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  LOOM_HOST_DEVICE BFloat16(float f) {  // NOLINT: implicit like a builtin float type
    uint32_t u = detail::f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  LOOM_HOST_DEVICE operator float() const { return detail::bits_f32(uint32_t(bits) << 16); }
};

// IEEE 754 binary16: 1 sign bit, 5 exponent bits, 10 mantissa bits. Round to nearest even.
//
// Note [Half conversions]
// The host converts with the integer arithmetic below: branches for inf/NaN, overflow and
// subnormals, then a rebias and round. Compiled into a kernel, the same code cost the fp16 cnn
// step about twice bfloat16's time in every batch-norm kernel on an H200 (bf16's conversion is a
// shift), so device code uses the GPU's conversion instructions (cvt.rn.f16.f32, cvt.f32.f16):
// the same round-to-nearest-even, overflow to infinity and subnormals. NaNs stay NaNs, though the
// instruction returns the canonical NaN rather than keeping the payload. The host version stays
// as the reference that tests/cuda compares the device against.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  static LOOM_HOST_DEVICE Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  LOOM_HOST_DEVICE Half(float f) {  // NOLINT
#if defined(__CUDA_ARCH__)
    // On the GPU one conversion instruction does the same rounding (Note [Half conversions]).
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    bits = h;
#else
    uint32_t x = detail::f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) {  // inf or NaN
      bits = static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
      return;
    }
    if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
      bits = static_cast<uint16_t>(sign | 0x7c00u);
      return;
    }
    if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
      // Adding 0.5 shifts the value so the float unit does the rounding for us.
      float v = detail::bits_f32(absx) + 0.5f;
      bits = static_cast<uint16_t>(sign | (detail::f32_bits(v) - 0x3f000000u));
      return;
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xc8000fffu + mant_odd;  // rebias exponent (127 -> 15) and round
    bits = static_cast<uint16_t>(sign | (absx >> 13));
#endif
  }
  LOOM_HOST_DEVICE operator float() const {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
#else
    uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t mant = bits & 0x3ffu;
    if (exp == 0x1f) return detail::bits_f32(sign | 0x7f800000u | (mant << 13));  // inf/NaN
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
      float v = float(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return detail::bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
#endif
  }
};

}  // namespace loom
