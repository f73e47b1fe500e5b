// CPU scaled dot-product attention, forward and backward (Backend::sdpa_forward and sdpa_backward,
// Note [Attention layout] in kernels/backend_methods.inc): the naive loops, one (batch, head) pair
// per task of the thread pool, every product and sum in float64, any floating dtype, any strides.
// It is the twin CUDA's fused flash attention is tested against (the attention op itself runs its
// composite of matmul and softmax on the CPU). Grouped-query heads (k and v with Hkv heads) are
// read in place: query head h uses key/value head h / (H / Hkv); key lengths (a padding mask) cut
// each batch row's keys. Leaves out: dropout, blocking and SIMD: one row of scores (Tk doubles) is
// all it keeps at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

namespace {

// A tensor's element (b, h, t, d) through its strides, read and written as double (half types
// through float, their accumulate type).
template <typename T>
struct Strided4 {
  T* p;
  int64_t s0, s1, s2, s3;
  double get(int64_t b, int64_t h, int64_t t, int64_t d) const {
    return double(acc_t<T>(p[b * s0 + h * s1 + t * s2 + d * s3]));
  }
  void set(int64_t b, int64_t h, int64_t t, int64_t d, double v) const {
    p[b * s0 + h * s1 + t * s2 + d * s3] = T(acc_t<T>(v));
  }
};

template <typename T>
Strided4<T> strided4(const Tensor& x) {
  return {x.data<T>(), x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
}

Tensor empty_bthd(int64_t B, int64_t H, int64_t T, int64_t D, DType dt) {
  return empty_attention_layout(B, H, T, D, {.dtype = dt});
}

struct Dims {
  int64_t B, H, Tq, Tk, D, Dv;
  int64_t Hkv;                   // key/value heads: query head h reads head h / (H / Hkv)
  std::vector<int64_t> lengths;  // (B) keys of each batch row (Note [Key lengths]); empty: Tk
  int64_t kv_head(int64_t h) const { return h / (H / Hkv); }
};

Dims dims_of(const Tensor& q, const Tensor& v, const Tensor& key_lengths) {
  Dims g{q.size(0), q.size(1), q.size(2), v.size(2), q.size(3), v.size(3), v.size(1), {}};
  if (key_lengths.defined()) g.lengths = key_lengths.contiguous().to_vector<int64_t>();
  for (int64_t len : g.lengths)
    LOOM_CHECK(len >= 1 && len <= g.Tk, "sdpa on the CPU: key_lengths holds ", len,
               ", outside [1, Tk = ", g.Tk, "]");
  return g;
}

// Keys row i of batch b attends to: 0 .. n - 1 (top-left causal mask, or all Tk; then at most
// the row's key length).
int64_t keys_seen(const Dims& g, bool causal, int64_t b, int64_t i) {
  const int64_t n = causal ? std::min(i + 1, g.Tk) : g.Tk;
  return g.lengths.empty() ? n : std::min(n, g.lengths[size_t(b)]);
}

// p[j] = softmax over j < n of scale * q_i . k_j, in float64; returns the row's logsumexp.
template <typename T>
double softmax_row(const Strided4<T>& q, const Strided4<T>& k, const Dims& g, int64_t b, int64_t h,
                   int64_t i, int64_t n, double scale, std::vector<double>& p) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t d = 0; d < g.D; ++d) s += q.get(b, h, i, d) * k.get(b, g.kv_head(h), j, d);
    p[size_t(j)] = s * scale;
    m = std::max(m, p[size_t(j)]);
  }
  double l = 0;
  for (int64_t j = 0; j < n; ++j) l += std::exp(p[size_t(j)] - m);
  double lse = m + std::log(l);
  for (int64_t j = 0; j < n; ++j) p[size_t(j)] = std::exp(p[size_t(j)] - lse);
  return lse;
}

template <typename T, typename S>
void forward_kernel(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& out0,
                    const Tensor& stats0, const Dims& g, bool causal, double scale) {
  auto q = strided4<T>(q0), k = strided4<T>(k0), v = strided4<T>(v0), out = strided4<T>(out0);
  auto stats = strided4<S>(stats0);
  parallel_for(0, g.B * g.H, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> p(size_t(g.Tk));
    for (int64_t bh = begin; bh < end; ++bh) {
      int64_t b = bh / g.H, h = bh % g.H;
      for (int64_t i = 0; i < g.Tq; ++i) {
        int64_t n = keys_seen(g, causal, b, i);
        stats.set(b, h, i, 0, softmax_row(q, k, g, b, h, i, n, scale, p));
        for (int64_t e = 0; e < g.Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += p[size_t(j)] * v.get(b, g.kv_head(h), j, e);
          out.set(b, h, i, e, acc);
        }
      }
    }
  });
}

// With P = softmax(s) and dP = dO v^T: dv = P^T dO, dS = P * (dP - rowsum(P * dP)),
// dq = scale * dS k, dk = scale * dS^T q. The row sum is taken from P and dP themselves rather
// than from dO . out (what flash attention does), and P is recomputed from q and k rather than
// from the saved stats: the forward's outputs are not read, so a rounded `out` cannot enter the
// gradients of this reference (the forward's stats are tested on their own).
template <typename T>
struct BackwardViews {
  Strided4<T> go, q, k, v, dq;
};

// Query head h of batch b: writes its dq rows, adds its share of dk and dv (of its key/value head)
// into dk_acc (Tk, D) and dv_acc (Tk, Dv).
template <typename T>
void backward_head(const BackwardViews<T>& a, const Dims& g, int64_t b, int64_t h, bool causal,
                   double scale, std::vector<double>& dk_acc, std::vector<double>& dv_acc) {
  const int64_t hk = g.kv_head(h);
  std::vector<double> p(size_t(g.Tk)), dp(size_t(g.Tk)), dq_row(size_t(g.D));
  for (int64_t i = 0; i < g.Tq; ++i) {
    int64_t n = keys_seen(g, causal, b, i);
    softmax_row(a.q, a.k, g, b, h, i, n, scale, p);
    double row = 0;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t e = 0; e < g.Dv; ++e) s += a.go.get(b, h, i, e) * a.v.get(b, hk, j, e);
      dp[size_t(j)] = s;
      row += p[size_t(j)] * s;
    }
    std::fill(dq_row.begin(), dq_row.end(), 0.0);
    for (int64_t j = 0; j < n; ++j) {
      double ds = p[size_t(j)] * (dp[size_t(j)] - row) * scale;
      for (int64_t d = 0; d < g.D; ++d) {
        dq_row[size_t(d)] += ds * a.k.get(b, hk, j, d);
        dk_acc[size_t(j * g.D + d)] += ds * a.q.get(b, h, i, d);
      }
      for (int64_t e = 0; e < g.Dv; ++e)
        dv_acc[size_t(j * g.Dv + e)] += p[size_t(j)] * a.go.get(b, h, i, e);
    }
    for (int64_t d = 0; d < g.D; ++d) a.dq.set(b, h, i, d, dq_row[size_t(d)]);
  }
}

// One task per (batch, key/value head): its H / Hkv query heads in order, so dk and dv are the
// sums over the group, added in a fixed order.
template <typename T>
void backward_kernel(const Tensor& go0, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                     const SdpaGrads& gr, const Dims& g, bool causal, double scale) {
  const BackwardViews<T> a{strided4<T>(go0), strided4<T>(q0), strided4<T>(k0), strided4<T>(v0),
                           strided4<T>(gr.dq)};
  auto dk = strided4<T>(gr.dk), dv = strided4<T>(gr.dv);
  const int64_t group = g.H / g.Hkv;
  parallel_for(0, g.B * g.Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> dk_acc(size_t(g.Tk * g.D)), dv_acc(size_t(g.Tk * g.Dv));
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / g.Hkv, hk = bk % g.Hkv;
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
        backward_head(a, g, b, h, causal, scale, dk_acc, dv_acc);
      for (int64_t j = 0; j < g.Tk; ++j) {
        for (int64_t d = 0; d < g.D; ++d) dk.set(b, hk, j, d, dk_acc[size_t(j * g.D + d)]);
        for (int64_t e = 0; e < g.Dv; ++e) dv.set(b, hk, j, e, dv_acc[size_t(j * g.Dv + e)]);
      }
    }
  });
}

DType stats_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace

TensorPair CpuBackend::sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale, const Tensor& key_lengths) {
  check_sdpa_inputs("sdpa_forward", q, k, v);
  check_sdpa_key_lengths("sdpa_forward", q, key_lengths);
  Dims g = dims_of(q, v, key_lengths);
  Tensor out = empty_bthd(g.B, g.H, g.Tq, g.Dv, q.dtype());
  Tensor stats = empty({g.B, g.H, g.Tq, 1}, {.dtype = stats_dtype(q.dtype())});
  if (out.numel() == 0) return {out, stats};
  LOOM_CHECK(g.Tk > 0, "sdpa_forward: k ", k.shape(), " has no keys to attend to");
  LOOM_DISPATCH_FLOATING(q.dtype(), "sdpa_forward", [&] {
    using S = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    forward_kernel<scalar_t, S>(q, k, v, out, stats, g, causal, scale);
  });
  return {out, stats};
}

SdpaGrads CpuBackend::sdpa_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& stats,
                                    bool causal, double scale, const SdpaGrads& into,
                                    const Tensor& key_lengths) {
  check_sdpa_inputs("sdpa_backward", q, k, v);
  check_sdpa_key_lengths("sdpa_backward", q, key_lengths);
  Dims g = dims_of(q, v, key_lengths);
  Shape out_shape{g.B, g.H, g.Tq, g.Dv};
  LOOM_CHECK(
      grad_out.shape() == out_shape && out.shape() == out_shape && grad_out.dtype() == q.dtype(),
      "sdpa_backward: grad_out ", describe(grad_out), " and out ", out.shape(),
      " must be (B, H, Tq, Dv) = ", out_shape, " of q's dtype ", dtype_name(q.dtype()));
  LOOM_CHECK(stats.shape() == Shape({g.B, g.H, g.Tq, 1}), "sdpa_backward: stats ", stats.shape(),
             " must be (B, H, Tq, 1) = ", Shape({g.B, g.H, g.Tq, 1}));
  check_sdpa_into("sdpa_backward", into, q, k, v);
  SdpaGrads gr = into.dq.defined() ? into
                                   : SdpaGrads{empty_bthd(g.B, g.H, g.Tq, g.D, q.dtype()),
                                               empty_bthd(g.B, g.Hkv, g.Tk, g.D, q.dtype()),
                                               empty_bthd(g.B, g.Hkv, g.Tk, g.Dv, q.dtype())};
  LOOM_DISPATCH_FLOATING(q.dtype(), "sdpa_backward", [&] {
    backward_kernel<scalar_t>(grad_out, q, k, v, gr, g, causal, scale);
  });
  return gr;
}

}  // namespace loom::cpu
