// What the tests of CUDA's fused attention share (tests/kernels/cuda/attention/): whether the
// fused path is there (asked as the attention op asks it) and the skip when it is not, the CPU
// float32 copy the naive twin runs on, and the bound of Note [Attention bounds]
// (test_cuda_attention.cpp) as one check. Leaves out: the tests' shapes and references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/available.h"
#include "kernels/raw_ops.h"
#include "support/nn_kernels_support.h"

namespace loom::testing {

// Empty when CUDA's fused attention takes bf16 (B, H, T, 64) inputs, else why not.
inline std::string fused_sdpa_missing() {
  Tensor probe = empty({1, 1, 8, 64}, {.dtype = kBF16, .device = gpu()});
  return sdpa_fused_unsupported(probe, probe, probe);
}

#define SKIP_WITHOUT_FUSED_SDPA()                                    \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"; \
  if (std::string why = loom::testing::fused_sdpa_missing(); !why.empty()) GTEST_SKIP() << why

// t on the CPU as contiguous float32: the naive twin's input from the GPU's rounded values.
inline Tensor f32_on_cpu(const Tensor& t) { return raw::contiguous(raw::cast(t.to(kCPU), kF32)); }

// |got - want| <= c u (max|want| + 1) for every element, u the unit roundoff of dt (2^-8
// bfloat16, 2^-11 float16): Note [Attention bounds] (c = 2 forward, 8 backward, times the
// group size for grouped heads' dk and dv).
inline ::testing::AssertionResult within_attention_bound(const Tensor& want, const Tensor& got,
                                                         DType dt, double c) {
  const double u = dt == kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  if (want.shape() != got.shape())
    return ::testing::AssertionFailure()
           << "shape " << str(got.shape()) << ", want " << str(want.shape());
  std::vector<double> w = host(raw::cast(want, kF64)), g = host(raw::cast(got.to(kCPU), kF64));
  double max_ref = 0, worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(w[i]));
    const double e = std::fabs(g[i] - w[i]);
    if (!(e <= worst)) worst = e;  // a NaN becomes the worst
  }
  const double bound = c * u * (max_ref + 1);
  if (worst <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "error " << worst << " > bound " << bound;
}

}  // namespace loom::testing
