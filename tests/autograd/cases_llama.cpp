// Op-table cases for Llama's ops: rms_norm (with and without a weight, a transposed input, rows
// the CUDA fast path takes and rows it declines), rope (an offset, a positions tensor with Llama
// 3's frequency scaling, heads split from a (B, T, H, D) tensor by a view), swiglu (separate
// tensors, and the halves of one packed gate_up projection) and grouped-query
// scaled_dot_product_attention (k and v with fewer heads than q, causal or not, multi-query), each
// against a float64 loop written here (the RoPE frequencies too, from transformers' formulas in
// their own words). Leaves out: the fused-against-composite and error tests
// (tests/autograd/ops/test_rms_norm.cpp, test_rope.cpp, test_elementwise_swiglu.cpp,
// test_attention_gqa.cpp).
#include <cmath>
#include <optional>

#include "op_table.h"

namespace loom::testing {

namespace {
using A = ref::Array;

// y = w * x / sqrt(mean(x^2) + eps) over the last dim of x; w (N) or null.
A rms_norm_ref(const A& x, const A* w, double eps) {
  const int64_t N = x.shape.back(), M = x.numel() / N;
  A y = ref::zeros(x.shape);
  for (int64_t i = 0; i < M; ++i) {
    double q = 0;
    for (int64_t j = 0; j < N; ++j) q += x.v[i * N + j] * x.v[i * N + j];
    const double r = 1 / std::sqrt(q / double(N) + eps);
    for (int64_t j = 0; j < N; ++j) y.v[i * N + j] = x.v[i * N + j] * r * (w ? w->v[j] : 1.0);
  }
  return y;
}

A transpose01_ref(const A& a) {  // (P, Q, ...) -> (Q, P, ...)
  const int64_t P = a.shape[0], Q = a.shape[1], inner = a.numel() / (P * Q);
  Shape s = a.shape;
  std::swap(s[0], s[1]);
  A o = ref::zeros(s);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t q = 0; q < Q; ++q)
      for (int64_t e = 0; e < inner; ++e)
        o.v[(q * P + p) * inner + e] = a.v[(p * Q + q) * inner + e];
  return o;
}

// The frequencies in other words than autograd/ops/rope.cpp: with r = L / wavelen = L f / (2 pi),
// a frequency is kept when r > h, divided by the factor when r < l, and in between scaled by
// s + (1 - s) / factor with s = (r - l) / (h - l).
std::vector<double> inv_freq_ref(double theta, int64_t D,
                                 const std::optional<RopeLlama3Scaling>& sc) {
  std::vector<double> f;
  for (int64_t k = 0; k < D / 2; ++k) {
    double v = std::exp(-std::log(theta) * double(2 * k) / double(D));
    if (sc) {
      const double r =
          double(sc->original_max_position_embeddings) * v / (2 * 3.14159265358979323846);
      const double l = sc->low_freq_factor, h = sc->high_freq_factor;
      if (r < l)
        v /= sc->factor;
      else if (r <= h)
        v *= (r - l) / (h - l) + (1 - (r - l) / (h - l)) / sc->factor;
    }
    f.push_back(v);
  }
  return f;
}

// x (B, H, T, D) rotated: pair (k, k + D/2) of row (b, h, t) by pos(b, t) * inv[k].
A rope_ref(const A& x, const std::function<double(int64_t, int64_t)>& pos,
           const std::vector<double>& inv) {
  const int64_t B = x.shape[0], H = x.shape[1], T = x.shape[2], D = x.shape[3], half = D / 2;
  A y = ref::zeros(x.shape);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < half; ++k) {
          const double a = pos(b, t) * inv[size_t(k)], c = std::cos(a), s = std::sin(a);
          const double x1 = x.at({b, h, t, k}), x2 = x.at({b, h, t, k + half});
          y.at({b, h, t, k}) = x1 * c - x2 * s;
          y.at({b, h, t, k + half}) = x2 * c + x1 * s;
        }
  return y;
}

// (B, T, H, D) -> (B, H, T, D)
A heads_ref(const A& a) {
  const int64_t B = a.shape[0], T = a.shape[1], H = a.shape[2], D = a.shape[3];
  A o = ref::zeros({B, H, T, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) o.at({b, h, t, d}) = a.at({b, t, h, d});
  return o;
}

// Attention with query head h reading key/value head h / (H / Hkv): q (B, H, Tq, D),
// k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv) -> (B, H, Tq, Dv), scale 1 / sqrt(D).
A gqa_ref(const A& q, const A& k, const A& v, bool causal) {
  const int64_t B = q.shape[0], H = q.shape[1], Tq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Tk = k.shape[2], Dv = v.shape[3], group = H / Hkv;
  A o = ref::zeros({B, H, Tq, Dv});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t seen = causal ? std::min(i + 1, Tk) : Tk, hk = h / group;
        std::vector<double> w(static_cast<size_t>(seen));
        double m = -INFINITY, total = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q.at({b, h, i, d}) * k.at({b, hk, j, d});
          m = std::max(m, w[size_t(j)] = dot / std::sqrt(double(D)));
        }
        for (double& x : w) total += (x = std::exp(x - m));
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < seen; ++j) acc += w[size_t(j)] / total * v.at({b, hk, j, e});
          o.at({b, h, i, e}) = acc;
        }
      }
  return o;
}

double silu_times(double a, double b) { return a / (1 + std::exp(-a)) * b; }

OpCase gqa_case(const std::string& name, Shape q, Shape kv, Shape v, bool causal) {
  return {name,
          {{q}, {kv}, {v}},
          [causal](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); },
          [causal](auto& r) { return gqa_ref(r[0], r[1], r[2], causal); }};
}

void add_rms_norm_cases(std::vector<OpCase>& cs) {
  cs.push_back({"rms_norm_weight",
                {{{3, 4, 8}}, {{8}}},
                [](auto& x) { return rms_norm(x[0], x[1], 1e-5); },
                [](auto& r) { return rms_norm_ref(r[0], &r[1], 1e-5); }});
  // N = 7: a row the CUDA fast path declines (not a multiple of 4), no weight.
  cs.push_back({"rms_norm_odd_no_weight",
                {{{5, 7}}},
                [](auto& x) { return rms_norm(x[0]); },
                [](auto& r) { return rms_norm_ref(r[0], nullptr, 1e-6); }});
  // A transposed (non-contiguous) input, made contiguous by the op.
  cs.push_back({"rms_norm_transposed",
                {{{6, 2, 12}}, {{12}}},
                [](auto& x) { return rms_norm(x[0].transpose(0, 1), x[1], 1e-5); },
                [](auto& r) { return rms_norm_ref(transpose01_ref(r[0]), &r[1], 1e-5); }});
}

void add_rope_cases(std::vector<OpCase>& cs) {
  cs.push_back({"rope_offset",
                {{{2, 3, 5, 8}}},
                [](auto& x) { return rope(x[0], 3, RopeConfig{}); },
                [](auto& r) {
                  return rope_ref(
                      r[0], [](int64_t, int64_t t) { return double(3 + t); },
                      inv_freq_ref(500000.0, 8, std::nullopt));
                }});
  // Llama 3's scaling with L = 64 and theta 10000: of D / 2 = 8 frequencies one is kept, two are
  // interpolated and five divided; positions (B, T) drawn in [0, 64).
  static const RopeConfig llama3{10000.0, 64, RopeLlama3Scaling{8.0, 1.0, 4.0, 64}};
  cs.push_back({"rope_llama3_positions",
                {{{2, 2, 4, 16}}, {{2, 4}, Init::Int, false, 64}},
                [](auto& x) { return rope(x[0], x[1], llama3); },
                [](auto& r) {
                  const A& p = r[1];
                  return rope_ref(
                      r[0], [&](int64_t b, int64_t t) { return p.v[b * 4 + t]; },
                      inv_freq_ref(10000.0, 16, llama3.llama3));
                }});
  // Heads split from a (B, T, H, D) projection by a view, with one (T) positions vector.
  cs.push_back({"rope_heads_view_positions",
                {{{2, 5, 3, 6}}, {{5}, Init::Int, false, 40}},
                [](auto& x) { return rope(x[0].transpose(1, 2), x[1], RopeConfig{}); },
                [](auto& r) {
                  const A& p = r[1];
                  return rope_ref(
                      heads_ref(r[0]), [&](int64_t, int64_t t) { return p.v[t]; },
                      inv_freq_ref(500000.0, 6, std::nullopt));
                }});
}

void add_swiglu_cases(std::vector<OpCase>& cs) {
  cs.push_back({"swiglu",
                {{{4, 6}}, {{4, 6}}},
                [](auto& x) { return swiglu(x[0], x[1]); },
                [](auto& r) { return ref::map2(r[0], r[1], &silu_times); }});
  // gate and up as the two halves of one (B, T, 2 I) projection: strided views.
  cs.push_back({"swiglu_packed_halves",
                {{{2, 3, 10}}},
                [](auto& x) { return swiglu(slice(x[0], 2, 0, 5), slice(x[0], 2, 5, 10)); },
                [](auto& r) {
                  A a = ref::zeros({2, 3, 5}), b = ref::zeros({2, 3, 5});
                  for (int64_t i = 0; i < 6; ++i)
                    for (int64_t j = 0; j < 5; ++j)
                      a.v[i * 5 + j] = r[0].v[i * 10 + j], b.v[i * 5 + j] = r[0].v[i * 10 + 5 + j];
                  return ref::map2(a, b, &silu_times);
                }});
}

}  // namespace

std::vector<OpCase> llama_cases() {
  std::vector<OpCase> cs;
  add_rms_norm_cases(cs);
  add_rope_cases(cs);
  add_swiglu_cases(cs);
  // ---- grouped-query attention: 4 query heads over 2 key/value heads, and multi-query (1).
  cs.push_back(gqa_case("sdpa_gqa", {2, 4, 5, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, false));
  cs.push_back(gqa_case("sdpa_mqa_causal", {1, 3, 6, 4}, {1, 1, 6, 4}, {1, 1, 6, 4}, true));
  // D = 8: a head size cuDNN's fused attention takes, so on CUDA (bf16, f16) it runs fused.
  cs.push_back(gqa_case("sdpa_gqa_causal_d8", {1, 4, 6, 8}, {1, 2, 6, 8}, {1, 2, 6, 8}, true));
  return cs;
}

}  // namespace loom::testing
