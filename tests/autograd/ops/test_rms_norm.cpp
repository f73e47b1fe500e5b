// rms_norm (autograd/ops/rms_norm.cpp) against its composite, the oracle: values and gradients in
// float32 and float64 on rows of several widths; Hugging Face's rounding for a bfloat16 x (the
// normalised row rounded to bfloat16 before the weight, y in the weight's dtype); float32 under
// autocast; the errors, which name the op, the shapes and the dtypes. The forward against float64
// loops and the gradients against finite differences are the op table's rows
// (tests/autograd/cases_llama.cpp); CUDA's kernels: tests/kernels/cuda/norm/test_cuda_rms_norm.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"

using namespace loom;

namespace {

// Largest |a - b| / max(1, |b|) over the elements.
double max_rel(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i)
    m = std::max(m, std::fabs(x[i] - y[i]) / std::max(1.0, std::fabs(y[i])));
  return m;
}

struct Result {
  Tensor y, dx, dw;
};

// y and the gradients of sum(y * g) for x, weight (fused or composite).
Result run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& g) {
  Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
  Tensor y = fused ? rms_norm(x, w, 1e-5) : rms_norm_composite(x, w, 1e-5);
  (y * g).sum().backward();
  return {y.detach(), x.grad(), w.grad()};
}

std::string what(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RmsNorm, FusedMatchesTheCompositeInFloat32AndFloat64) {
  for (DType d : {kF32, kF64})
    for (int64_t N : {1, 7, 64, 1030}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " N=" + std::to_string(N));
      manual_seed(uint64_t(N));
      Tensor x = (randn({3, 5, N}) * 3.0).to(d), w = randn({N}).to(d), g = randn({3, 5, N}).to(d);
      Result f = run(true, x, w, g), c = run(false, x, w, g);
      const double tol = d == kF64 ? 1e-12 : 2e-5;
      EXPECT_EQ(f.y.dtype(), d);
      EXPECT_LE(max_rel(f.y, c.y), tol);
      EXPECT_LE(max_rel(f.dx, c.dx), tol);
      EXPECT_LE(max_rel(f.dw, c.dw), tol * std::sqrt(15.0));  // a sum over 15 rows
    }
}

// Hugging Face: h = (x.float() * rsqrt(...)).to(bfloat16); y = w * h. The composite does those ops
// one by one; the fused op rounds the same normalised values once to bfloat16, then multiplies.
TEST(RmsNorm, Bfloat16RoundsTheNormalisedRowBeforeTheWeightAsHuggingFace) {
  manual_seed(3);
  Tensor x = (randn({16, 48}) * 4.0).to(kBF16), w = (randn({48}) + 1.0).to(kBF16);
  Tensor y = rms_norm(x, w), c = rms_norm_composite(x, w);
  EXPECT_EQ(y.dtype(), kBF16);
  EXPECT_LE(max_rel(y, c), 1.0 / 128);  // one bfloat16 rounding at most
  // The normalised row alone (no weight) is the composite's bit for bit but for double rounding.
  EXPECT_LE(max_rel(rms_norm(x), rms_norm_composite(x)), 1.0 / 256);
  // A float32 weight with a bfloat16 x: y is float32, the weight times the rounded row.
  Tensor w32 = w.to(kF32), y32 = rms_norm(x, w32);
  EXPECT_EQ(y32.dtype(), kF32);
  EXPECT_LE(max_rel(y32, rms_norm(x).to(kF32) * w32), 1e-6);
}

TEST(RmsNorm, RunsInFloat32UnderAutocast) {
  manual_seed(4);
  Tensor x = randn({4, 32}).to(kBF16), w = randn({32});
  Tensor y;
  {
    amp::Autocast ac(kBF16);
    y = rms_norm(x, w);
  }
  EXPECT_EQ(y.dtype(), kF32);
  EXPECT_LE(max_rel(y, rms_norm(x.to(kF32), w)), 1e-6);
}

TEST(RmsNorm, ErrorsNameTheOpShapesAndDtypes) {
  Tensor x = randn({2, 8});
  std::string m = what([&] { rms_norm(x, randn({7})); });
  EXPECT_NE(m.find("rms_norm"), std::string::npos) << m;
  EXPECT_NE(m.find("[7]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 8]"), std::string::npos) << m;
  m = what([&] { rms_norm(x.to(kF64), randn({8})); });
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  EXPECT_NE(m.find("float64"), std::string::npos) << m;
  m = what([&] { rms_norm(randint(0, 4, {2, 8})); });
  EXPECT_NE(m.find("rms_norm"), std::string::npos) << m;
  EXPECT_NE(m.find("int64"), std::string::npos) << m;
}
