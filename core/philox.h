// Philox4x32-10: a counter-based random number generator (Salmon et al., SC'11). Given a 64-bit
// key (the seed) and a 128-bit counter it returns four independent 32-bit words, so element i of
// any draw can be computed on its own: the CPU loop and the CUDA kernel produce identical streams.
// Leaves out: state; the Generator (core/generator.h) hands out counter offsets.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace loom {

struct Philox4 {
  uint32_t v[4];
};

LOOM_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// counter = (c0, c1, c2, c3), key = seed.
LOOM_HOST_DEVICE inline Philox4 philox4x32(uint64_t seed, uint64_t c_lo, uint64_t c_hi) {
  uint32_t c0 = uint32_t(c_lo), c1 = uint32_t(c_lo >> 32), c2 = uint32_t(c_hi),
           c3 = uint32_t(c_hi >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c0, hi0, lo0);
    philox_mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Element i of a draw that starts at counter `offset`: word i % 4 of block (offset + i / 4).
LOOM_HOST_DEVICE inline uint32_t philox_u32(uint64_t seed, uint64_t offset, uint64_t i) {
  Philox4 r = philox4x32(seed, offset + i / 4, 0);
  return r.v[i % 4];
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float32).
LOOM_HOST_DEVICE inline float u32_to_unit_float(uint32_t x) {
  return float(x >> 8) * (1.0f / 16777216.0f);
}

// Uniform in [0, 1) from the element's own block: f32 uses 24 bits, f64 53 bits from two words.
LOOM_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t offset, uint64_t i,
                                              bool f64) {
  Philox4 r = philox4x32(seed, offset + i, 1);  // one block per element: words 0..3 all its own
  if (!f64) return u32_to_unit_float(r.v[0]);
  uint64_t bits = (uint64_t(r.v[0]) << 21) ^ uint64_t(r.v[1] >> 11);  // 53 bits
  return double(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Standard normal for element i (Box-Muller on the element's own block).
LOOM_HOST_DEVICE inline double philox_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  Philox4 r = philox4x32(seed, offset + i, 2);
  // u1 in (0, 1] so that log(u1) is finite.
  double u1 = (double(r.v[0]) + 1.0) * (1.0 / 4294967296.0);
  double u2 = double(r.v[1]) * (1.0 / 4294967296.0);
#if defined(__CUDA_ARCH__)
  return sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
#else
  const double two_pi = 6.283185307179586;
  return __builtin_sqrt(-2.0 * __builtin_log(u1)) * __builtin_cos(two_pi * u2);
#endif
}

}  // namespace loom
