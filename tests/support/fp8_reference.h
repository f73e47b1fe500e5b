// The tests' float64 reference of the tensorwise FP8 recipe (docs/fp8.md): a tensor quantised
// with the reference encoder of kernels/fp8.h, element by element on the host, its codes, and its
// dequantised values decode(code) * inv_scale in float64 (exact: 4 significant bits times a
// float32). Products of these in float64 are what an FP8 GEMM computes up to its float32
// accumulation. Leaves out: the backends' kernels, which the tests compare against this.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/fp8.h"

namespace loom::test {

struct Fp8Reference {
  std::vector<uint8_t> codes;  // row-major, x's shape
  float amax = 0, scale = 1, inv_scale = 1;
  Tensor dequantized;  // float64 on the CPU, x's shape
};

inline Fp8Reference fp8_reference(const Tensor& x, Fp8Format f) {
  const std::vector<float> v = x.to(kCPU).to(kF32).contiguous().to_vector<float>();
  Fp8Reference r;
  for (float e : v) r.amax = std::max(r.amax, std::fabs(e));
  r.scale = fp8_scale(r.amax, float(fp8_max(f)));
  r.inv_scale = 1.0f / r.scale;
  std::vector<double> dq(v.size());
  r.codes.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r.codes[i] = fp8_encode(v[i] * r.scale, f);
    dq[i] = double(fp8_decode(r.codes[i], f)) * double(r.inv_scale);
  }
  r.dequantized = from_vector(dq, x.shape());
  return r;
}

// The largest |a - b| over all elements, both read as float64 on the CPU.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kCPU).to(kF64) - b.to(kCPU).to(kF64))).item();
}

// The largest |a|, as float64.
inline double max_abs(const Tensor& a) { return max(abs(a.to(kCPU).to(kF64))).item(); }

}  // namespace loom::test
