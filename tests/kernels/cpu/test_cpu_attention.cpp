// kernels/cpu/cpu_attention.cpp: the CPU's naive scaled dot-product attention
// (Backend::sdpa_forward and sdpa_backward) against float64 loops written here (the whole masked
// score matrix, then a softmax per row), with and without the causal mask, odd T, Tq != Tk, several
// heads, strided inputs (views of one qkv buffer), float32 and bfloat16; the backward against
// central finite differences of sum(out * R) for a random R. Leaves out: the GPU
// (test_cuda_attention.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

using namespace loom;

namespace {

cpu::CpuBackend& be() { return cpu::cpu_backend(); }

Tensor randn_t(const Shape& s, DType dt, uint64_t seed) {
  Tensor t = empty(s, {.dtype = dt});
  be().random_(t, RandomKind::Normal, 0.0, 1.0, seed, 0);
  return t;
}

std::vector<double> values(const Tensor& t) {
  Tensor d = raw::contiguous(raw::cast(t, kF64));
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

struct Geometry {
  int64_t B, H, Tq, Tk, D;
  bool causal;
  double scale;
  std::string name() const {
    return "B" + std::to_string(B) + "H" + std::to_string(H) + "Tq" + std::to_string(Tq) + "Tk" +
           std::to_string(Tk) + "D" + std::to_string(D) + (causal ? "causal" : "");
  }
};

struct Reference {
  std::vector<double> out, lse;  // (B, H, Tq, D) and (B, H, Tq), contiguous
};

// The definition: S = scale * q k^T with -inf where j > i (causal), P = softmax of each row of S,
// out = P v, lse = log(sum_j exp(S_ij)). q, k, v: contiguous float64 values.
Reference reference(const Geometry& g, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v) {
  Reference r{std::vector<double>(size_t(g.B * g.H * g.Tq * g.D)),
              std::vector<double>(size_t(g.B * g.H * g.Tq))};
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> S(size_t(g.Tq * g.Tk));
  for (int64_t bh = 0; bh < g.B * g.H; ++bh) {
    const double* qb = &q[size_t(bh * g.Tq * g.D)];
    const double* kb = &k[size_t(bh * g.Tk * g.D)];
    const double* vb = &v[size_t(bh * g.Tk * g.D)];
    for (int64_t i = 0; i < g.Tq; ++i)
      for (int64_t j = 0; j < g.Tk; ++j) {
        double s = 0;
        for (int64_t d = 0; d < g.D; ++d) s += qb[i * g.D + d] * kb[j * g.D + d];
        S[size_t(i * g.Tk + j)] = (g.causal && j > i) ? -inf : g.scale * s;
      }
    for (int64_t i = 0; i < g.Tq; ++i) {
      double* row = &S[size_t(i * g.Tk)];
      double m = *std::max_element(row, row + g.Tk), sum = 0;
      for (int64_t j = 0; j < g.Tk; ++j) sum += std::exp(row[j] - m);
      r.lse[size_t(bh * g.Tq + i)] = m + std::log(sum);
      for (int64_t d = 0; d < g.D; ++d) {
        double o = 0;
        for (int64_t j = 0; j < g.Tk; ++j) o += std::exp(row[j] - m) / sum * vb[j * g.D + d];
        r.out[size_t((bh * g.Tq + i) * g.D + d)] = o;
      }
    }
  }
  return r;
}

// |got - want| <= tol * max(1, max|want|) for every element.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), tol * scale)
        << what << ": element " << i << " is " << got[i] << ", the float64 loops give " << want[i];
}

std::vector<Geometry> geometries() {
  return {{2, 3, 5, 5, 4, false, 0.5},
          {2, 3, 5, 5, 4, true, 0.5},
          {1, 4, 7, 7, 8, true, 1 / std::sqrt(8.0)},
          {2, 2, 3, 6, 5, false, 0.37},
          {2, 2, 3, 6, 5, true, 0.37},
          {1, 2, 6, 4, 3, true, 1.3}};
}

TEST(CpuAttention, ForwardMatchesFloat64Loops) {
  for (const Geometry& g : geometries()) {
    SCOPED_TRACE(g.name());
    Tensor q = randn_t({g.B, g.H, g.Tq, g.D}, kF64, 1), k = randn_t({g.B, g.H, g.Tk, g.D}, kF64, 2),
           v = randn_t({g.B, g.H, g.Tk, g.D}, kF64, 3);
    auto [out, stats] = be().sdpa_forward(q, k, v, g.causal, g.scale);
    ASSERT_EQ(out.shape(), Shape({g.B, g.H, g.Tq, g.D}));
    ASSERT_EQ(stats.shape(), Shape({g.B, g.H, g.Tq, 1}));
    EXPECT_EQ(stats.dtype(), kF64);
    // Laid out (B, Tq, H, D) behind the (B, H, Tq, D) shape (Note [Attention layout]).
    EXPECT_EQ(out.strides(), Strides({g.Tq * g.H * g.D, g.D, g.H * g.D, 1}));
    Reference r = reference(g, values(q), values(k), values(v));
    expect_close(values(out), r.out, 1e-13, "out");
    expect_close(values(stats), r.lse, 1e-13, "stats (logsumexp)");
  }
}

// The causal mask changes the result (so the test above reaches it): row 0 sees only key 0.
TEST(CpuAttention, CausalRowZeroIsValueZero) {
  Tensor q = randn_t({1, 1, 4, 3}, kF64, 4), k = randn_t({1, 1, 4, 3}, kF64, 5),
         v = randn_t({1, 1, 4, 3}, kF64, 6);
  auto out = values(be().sdpa_forward(q, k, v, true, 0.7).first);
  auto vv = values(v);
  for (int d = 0; d < 3; ++d) EXPECT_DOUBLE_EQ(out[size_t(d)], vv[size_t(d)]);
}

// q, k and v as views of one (B, T, 3, H, D) buffer, as a GPT splits its fused qkv projection.
TEST(CpuAttention, ReadsViewsOfOneQkvBuffer) {
  const int64_t B = 2, T = 5, H = 3, D = 4;
  Tensor qkv = randn_t({B, T, 3, H, D}, kF64, 7);
  auto part = [&](int64_t i) { return raw::permute(raw::select(qkv, 2, i), {0, 2, 1, 3}); };
  Tensor q = part(0), k = part(1), v = part(2);
  ASSERT_FALSE(q.is_contiguous());
  Geometry g{B, H, T, T, D, true, 0.5};
  auto [out, stats] = be().sdpa_forward(q, k, v, g.causal, g.scale);
  Reference r = reference(g, values(q), values(k), values(v));
  expect_close(values(out), r.out, 1e-13, "out");
  expect_close(values(stats), r.lse, 1e-13, "stats");
}

// Lower precision: the loops run on the same rounded inputs; the output is rounded once
// (float32: 2^-24 relative; bfloat16: 2^-8), the sums are float64 in both, so those are the bounds
// (times 2 for the rounding of the reference's own last operations).
TEST(CpuAttention, Float32AndBfloat16RoundOnlyTheOutput) {
  Geometry g{2, 2, 7, 7, 8, true, 1 / std::sqrt(8.0)};
  for (auto [dt, tol] :
       {std::pair{kF32, 2 * std::ldexp(1.0, -24)}, {kBF16, 2 * std::ldexp(1.0, -8)}}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor q = randn_t({g.B, g.H, g.Tq, g.D}, dt, 8), k = randn_t({g.B, g.H, g.Tk, g.D}, dt, 9),
           v = randn_t({g.B, g.H, g.Tk, g.D}, dt, 10);
    auto [out, stats] = be().sdpa_forward(q, k, v, g.causal, g.scale);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_EQ(stats.dtype(), kF32);
    Reference r = reference(g, values(q), values(k), values(v));
    expect_close(values(out), r.out, tol, "out");
    expect_close(values(stats), r.lse, 2 * std::ldexp(1.0, -24), "stats");
  }
}

// L(q, k, v) = sum(out * R), evaluated in float64 by the forward under test.
double loss(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& R,
            const Geometry& g) {
  auto out = values(be().sdpa_forward(q, k, v, g.causal, g.scale).first);
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * R[i];
  return s;
}

// dL/dx by central differences, x being q, k or v (contiguous float64, perturbed in place).
std::vector<double> numeric_grad(Tensor& x, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const std::vector<double>& R, const Geometry& g) {
  const double h = 1e-6;
  double* p = x.data<double>();
  std::vector<double> grad(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    double keep = p[i];
    p[i] = keep + h;
    double up = loss(q, k, v, R, g);
    p[i] = keep - h;
    double down = loss(q, k, v, R, g);
    p[i] = keep;
    grad[size_t(i)] = (up - down) / (2 * h);
  }
  return grad;
}

TEST(CpuAttention, BackwardMatchesCentralDifferences) {
  for (const Geometry& g : geometries()) {
    SCOPED_TRACE(g.name());
    Tensor q = randn_t({g.B, g.H, g.Tq, g.D}, kF64, 11),
           k = randn_t({g.B, g.H, g.Tk, g.D}, kF64, 12),
           v = randn_t({g.B, g.H, g.Tk, g.D}, kF64, 13);
    Tensor R = randn_t({g.B, g.H, g.Tq, g.D}, kF64, 14);
    auto [out, stats] = be().sdpa_forward(q, k, v, g.causal, g.scale);
    SdpaGrads gr = be().sdpa_backward(R, q, k, v, out, stats, g.causal, g.scale);
    EXPECT_EQ(gr.dk.strides(), Strides({g.Tk * g.H * g.D, g.D, g.H * g.D, 1}));
    auto Rv = values(R);
    // Central differences err by h^2 |f'''| / 6 (about 1e-12 here) plus rounding, about
    // 1e-16 * |L| / h = 1e-10: 1e-7 leaves room and still fails on any wrong term.
    expect_close(values(gr.dq), numeric_grad(q, q, k, v, Rv, g), 1e-7, "dq");
    expect_close(values(gr.dk), numeric_grad(k, q, k, v, Rv, g), 1e-7, "dk");
    expect_close(values(gr.dv), numeric_grad(v, q, k, v, Rv, g), 1e-7, "dv");
  }
}

// The backward reads grad_out, q, k and v through their strides like the forward.
TEST(CpuAttention, BackwardReadsStridedInputs) {
  const int64_t B = 1, T = 5, H = 2, D = 3;
  Geometry g{B, H, T, T, D, true, 0.8};
  Tensor qkv = randn_t({B, T, 3, H, D}, kF64, 15);
  auto part = [&](int64_t i) { return raw::permute(raw::select(qkv, 2, i), {0, 2, 1, 3}); };
  Tensor R = raw::transpose(randn_t({B, H, D, T}, kF64, 16), 2, 3);  // (B, H, T, D), strided
  auto [out, stats] = be().sdpa_forward(part(0), part(1), part(2), g.causal, g.scale);
  SdpaGrads strided =
      be().sdpa_backward(R, part(0), part(1), part(2), out, stats, g.causal, g.scale);
  Tensor q = raw::contiguous(part(0)), k = raw::contiguous(part(1)), v = raw::contiguous(part(2));
  SdpaGrads dense = be().sdpa_backward(raw::contiguous(R), q, k, v, out, stats, g.causal, g.scale);
  // The same sums in the same order, up to the compiler's vectorisation of unit-stride loops.
  expect_close(values(strided.dq), values(dense.dq), 1e-14, "dq");
  expect_close(values(strided.dk), values(dense.dk), 1e-14, "dk");
  expect_close(values(strided.dv), values(dense.dv), 1e-14, "dv");
  auto Rv = values(R);
  expect_close(values(dense.dq), numeric_grad(q, q, k, v, Rv, g), 1e-7, "dq");
}

TEST(CpuAttention, MismatchedShapesNameTheOp) {
  Tensor q = randn_t({1, 2, 4, 8}, kF64, 1), k = randn_t({1, 2, 4, 6}, kF64, 2);
  try {
    be().sdpa_forward(q, k, k, false, 1.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sdpa_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 2, 4, 6]"), std::string::npos) << e.what();
  }
}

// The CPU is never the fused path: the attention op asks sdpa_fused_unsupported and runs its
// composite there.
TEST(CpuAttention, FusedPathIsCudaOnly) {
  Tensor q = randn_t({1, 2, 4, 8}, kBF16, 1);
  std::string why = sdpa_fused_unsupported(q, q, q);
  EXPECT_NE(why.find("not on a CUDA device"), std::string::npos) << why;
}

}  // namespace
