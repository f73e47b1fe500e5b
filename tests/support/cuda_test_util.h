// Helpers shared by the CUDA tests: the availability check (also in CPU-only builds, where it is
// false and every test skips), inputs made once in float64 and rounded to the dtype under test,
// and comparisons with tolerances by dtype.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"  // is_available() in every build (false without the backend)
#ifdef LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif

namespace loom::testing {

// Forward tolerance of a low-precision result, relative to max(1, |reference|).
inline double forward_tol(DType d) {
  switch (d) {
    case DType::F16:
      return 1e-2;
    case DType::BF16:
      return 4e-2;
    case DType::F32:
      return 1e-4;
    default:
      return 1e-10;
  }
}
inline double backward_tol(DType d) {
  switch (d) {
    case DType::F16:
      return 3e-2;
    case DType::BF16:
      return 1e-1;
    case DType::F32:
      return 2e-4;
    default:
      return 1e-10;
  }
}

// Values of `t` (any device, any dtype) as doubles.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Every element of `got` within tol * max(1, |want|) of `want`; NaN matches NaN.
inline ::testing::AssertionResult all_close(const Tensor& want, const Tensor& got, double tol) {
  if (want.shape() != got.shape())
    return ::testing::AssertionFailure()
           << "shape " << str(got.shape()) << ", expected " << str(want.shape());
  std::vector<double> w = values(want), g = values(got);
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    if (w[i] == g[i]) continue;  // equal infinities
    if (!(std::fabs(g[i] - w[i]) <= tol * std::max(1.0, std::fabs(w[i]))))
      return ::testing::AssertionFailure() << "element " << i << " is " << g[i] << ", expected "
                                           << w[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// Bit-for-bit equality of two tensors' values (after conversion to double, which is exact).
inline ::testing::AssertionResult all_equal(const Tensor& want, const Tensor& got) {
  return all_close(want, got, 0.0);
}

}  // namespace loom::testing
