// The CPU softmax, nll_loss and index kernels against naive loops written here, on what the op
// table does not reach: sizes large enough to run in parallel, both layouts of the softmax
// kernel, half types, extreme logits, fully ignored batches, and heavily repeated indices.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"

namespace loom {
namespace {

Backend& cpu() { return backend_for(Device()); }

// Naive softmax of a row-major (outer, n, inner) array along the middle axis.
std::vector<double> naive_softmax(const std::vector<double>& x, int64_t outer, int64_t n,
                                  int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, x[at(j)]);
      for (int64_t j = 0; j < n; ++j) s += std::exp(x[at(j)] - m);
      for (int64_t j = 0; j < n; ++j)
        y[at(j)] = log ? x[at(j)] - m - std::log(s) : std::exp(x[at(j)] - m) / s;
    }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
}

// Large enough (> kGrainSize elements) that the row loop runs on every thread.
TEST(SoftmaxKernel, ParallelLastAndMiddleDimMatchNaive) {
  Tensor x = randn({40, 300, 7}, {.dtype = kF64}) * 3.0;
  auto xv = x.to_vector<double>();
  for (bool log : {false, true}) {
    expect_near_all(cpu().softmax(x, 2, log).to_vector<double>(),
                    naive_softmax(xv, 40 * 300, 7, 1, log), 1e-12);
    expect_near_all(cpu().softmax(x, 1, log).to_vector<double>(),
                    naive_softmax(xv, 40, 300, 7, log), 1e-12);
    expect_near_all(cpu().softmax(x, 0, log).to_vector<double>(),
                    naive_softmax(xv, 1, 40, 300 * 7, log), 1e-12);
  }
}

TEST(SoftmaxKernel, ExtremeLogitsStayFinite) {
  for (DType dt : {kF32, kF64}) {
    Tensor x = from_vector<double>({1000, 999, -1000, 0, -1e4, 1e4}, {2, 3}).to(dt);
    auto y = cpu().softmax(x, 1, false).to_vector<double>();
    auto ly = cpu().softmax(x, 1, true).to_vector<double>();
    auto want = naive_softmax(x.to_vector<double>(), 2, 3, 1, false);
    auto lwant = naive_softmax(x.to_vector<double>(), 2, 3, 1, true);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i]) && std::isfinite(ly[i])) << dtype_name(dt) << " " << i;
      EXPECT_NEAR(y[i], want[i], 1e-6);
      EXPECT_NEAR(ly[i], lwant[i], 1e-6 * std::max(1.0, std::fabs(lwant[i])));
    }
  }
}

// Note [Half softmax tolerance]
// For half inputs the kernel computes in float (exp, 1/s, the product: a few float ulps, 2^-23
// each) and rounds each output once to nearest. Rounding to nearest errs by at most the unit
// roundoff u relative to the value: 2^-8 for bf16 (8 significant bits), 2^-11 for f16 (11 bits).
// So |got - want| <= (u + 8 * 2^-24) * |want|, plus, for f16 only, half the subnormal spacing
// (2^-25) where the probability falls below f16's smallest normal (6.1e-5): there a relative bound
// does not hold. For log_softmax the float terms (x - m) and log(s) have the same sign, so their
// rounding errors are also relative to |want|. The reference uses the same rounded inputs.
// An error of one element's share in the sum (1/50 of it on average here) is far above u.
TEST(SoftmaxKernel, HalfTypesCloseToFloat32) {
  Tensor x = randn({33, 50}) * 2.0;
  const double float_err = 8 * std::ldexp(1.0, -24);
  for (DType dt : {kF16, kBF16}) {
    Tensor xh = x.to(dt);
    auto want = naive_softmax(xh.to_vector<double>(), 33, 50, 1, false);
    auto lwant = naive_softmax(xh.to_vector<double>(), 33, 50, 1, true);
    Tensor y = cpu().softmax(xh, 1, false), ly = cpu().softmax(xh, 1, true);
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(ly.dtype(), dt);
    const double u = dt == kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double abs_floor = dt == kF16 ? std::ldexp(1.0, -25) : 0.0;
    auto got = y.to_vector<double>(), lgot = ly.to_vector<double>();
    int bad = 0, lbad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::fabs(got[i] - want[i]) > (u + float_err) * want[i] + abs_floor && bad++ == 0)
        ADD_FAILURE() << dtype_name(dt) << " softmax element " << i << ": " << got[i] << " vs "
                      << want[i];
      if (std::fabs(lgot[i] - lwant[i]) > (u + float_err) * std::fabs(lwant[i]) && lbad++ == 0)
        ADD_FAILURE() << dtype_name(dt) << " log_softmax element " << i << ": " << lgot[i] << " vs "
                      << lwant[i];
    }
    EXPECT_EQ(bad, 0) << dtype_name(dt) << " softmax elements outside the rounding bound";
    EXPECT_EQ(lbad, 0) << dtype_name(dt) << " log_softmax elements outside the rounding bound";
  }
}

// softmax_backward against the composite formula, in every layout.
TEST(SoftmaxKernel, BackwardMatchesComposite) {
  Tensor x = randn({6, 200, 5}, {.dtype = kF64});
  Tensor g = randn({6, 200, 5}, {.dtype = kF64});
  for (int64_t dim : {0, 1, 2}) {
    Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
    Tensor want = y * (g - sum(g * y, {dim}, true));
    Tensor lwant = g - exp(ly) * sum(g, {dim}, true);
    expect_near_all(cpu().softmax_backward(g, y, dim, false).to_vector<double>(),
                    want.to_vector<double>(), 1e-12);
    expect_near_all(cpu().softmax_backward(g, ly, dim, true).to_vector<double>(),
                    lwant.to_vector<double>(), 1e-12);
    // A transposed gradient (non-contiguous) gives the same result.
    Tensor gt = g.transpose(0, 2).contiguous().transpose(0, 2);
    expect_near_all(cpu().softmax_backward(gt, y, dim, false).to_vector<double>(),
                    want.to_vector<double>(), 1e-12);
  }
}

TEST(NllLossKernel, AllRowsIgnored) {
  Tensor logp = randn({3, 4});
  Tensor t = from_vector<int64_t>({-100, -100, -100}, {3});
  EXPECT_TRUE(std::isnan(cpu().nll_loss(logp, t, Reduction::Mean, -100, "nll_loss").item()));
  EXPECT_EQ(cpu().nll_loss(logp, t, Reduction::Sum, -100, "nll_loss").item(), 0.0);
  Tensor g =
      cpu().nll_loss_backward(scalar_tensor(1.0), logp, t, Reduction::Mean, -100, "nll_loss");
  for (float v : g.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(NllLossKernel, LargeBatchMatchesNaive) {
  const int64_t N = 5000, C = 17;
  Tensor logp = log_softmax(randn({N, C}, {.dtype = kF64}), 1);
  Tensor t = randint(0, C, {N});
  auto lp = logp.to_vector<double>();
  auto tv = t.to_vector<int64_t>();
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum -= lp[size_t(i * C + tv[size_t(i)])];
  EXPECT_NEAR(cpu().nll_loss(logp, t, Reduction::Sum, -100, "nll_loss").item(), sum,
              1e-9 * std::fabs(sum));
  EXPECT_NEAR(cpu().nll_loss(logp, t, Reduction::Mean, -100, "nll_loss").item(), sum / double(N),
              1e-12);
  // Backward of Mean: -1/N at each target, 0 elsewhere.
  auto g = cpu()
               .nll_loss_backward(scalar_tensor(2.0, {.dtype = kF64}), logp, t, Reduction::Mean,
                                  -100, "nll_loss")
               .to_vector<double>();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(g[size_t(i * C + c)], c == tv[size_t(i)] ? -2.0 / double(N) : 0.0);
}

// index_add against a naive loop, in both of its parallel splits (many outer slabs; one slab
// with a long inner run), with indices repeated many times.
TEST(IndexKernel, IndexAddRepeatsMatchNaive) {
  struct Case {
    Shape shape;
    int64_t dim;
  };
  for (const Case& c : {Case{{64, 10, 3}, 1}, Case{{10, 4096}, 0}, Case{{7, 9}, 1}}) {
    int64_t n = c.shape[size_t(c.dim)], K = 3 * n + 5;
    std::vector<int64_t> idx(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) idx[size_t(k)] = (k * 7 + 3) % n;
    idx[0] = idx[1] = idx[2] = 0;
    Shape src_shape = c.shape;
    src_shape[size_t(c.dim)] = K;
    Tensor src = randn(src_shape, {.dtype = kF64});
    Tensor out = cpu().index_add(c.shape, c.dim, from_vector<int64_t>(idx, {K}), src);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < c.dim; ++d) outer *= c.shape[size_t(d)];
    for (int64_t d = c.dim + 1; d < int64_t(c.shape.size()); ++d) inner *= c.shape[size_t(d)];
    std::vector<double> want(size_t(numel(c.shape)), 0.0);
    auto sv = src.to_vector<double>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < inner; ++i)
          want[size_t((o * n + idx[size_t(k)]) * inner + i)] += sv[size_t((o * K + k) * inner + i)];
    expect_near_all(out.to_vector<double>(), want, 1e-12);
    // index_select is the adjoint: <index_select(x), src> == <x, index_add(src)>.
    Tensor x = randn(c.shape, {.dtype = kF64});
    double lhs = sum(cpu().index_select(x, c.dim, from_vector<int64_t>(idx, {K})) * src).item();
    double rhs = sum(x * out).item();
    EXPECT_NEAR(lhs, rhs, 1e-9 * std::max(1.0, std::fabs(rhs)));
  }
}

TEST(IndexKernel, IndexSelectIntegerAndBoolTensors) {
  Tensor x = arange(12).view({3, 4});
  auto v = cpu().index_select(x, 1, from_vector<int64_t>({3, 3, 0}, {3})).to_vector<int64_t>();
  EXPECT_EQ(v, (std::vector<int64_t>{3, 3, 0, 7, 7, 4, 11, 11, 8}));
  Tensor b = gt(x, 5.0);
  auto bv = cpu().index_select(b, 0, from_vector<int64_t>({2, 0}, {2})).to_vector<int64_t>();
  // Expected values computed, not spelled out: GCC 12.2 at -O2 -mavx512f (-march=native here)
  // miscompiles the literal vector<int64_t>{1, 1, 1, 1, 0, 0, 0, 0} into eight ones.
  std::vector<int64_t> bwant;
  for (int64_t row : {2, 0})
    for (int64_t j = 0; j < 4; ++j) bwant.push_back(row * 4 + j > 5);
  EXPECT_EQ(bv, bwant);
}

}  // namespace
}  // namespace loom
