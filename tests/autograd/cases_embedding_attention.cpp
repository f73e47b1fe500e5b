// Op-table cases for the GPT ops: embedding (repeated ids, a transposed table, ids of several
// dims) and scaled_dot_product_attention (4-d and 3-d, causal or not, odd lengths, several heads,
// Tq != Tk both ways, an explicit scale, heads split from a (B, T, H, D) tensor by a view), each
// against a float64 loop written here. GELU-tanh is in cases_elementwise.cpp.
// Leaves out: attention with dropout (random: tests/autograd/ops/test_attention.cpp).
#include <cmath>

#include "op_table.h"

namespace loom::testing {

namespace {
using A = ref::Array;

// out[s, d] = w[ids[s], d]: weight (V, D), ids of shape S -> S + (D).
A embedding_ref(const A& w, const A& ids) {
  const int64_t D = w.shape[1];
  Shape s = ids.shape;
  s.push_back(D);
  A o = ref::zeros(s);
  for (int64_t i = 0; i < ids.numel(); ++i)
    for (int64_t d = 0; d < D; ++d) o.v[i * D + d] = w.v[int64_t(ids.v[i]) * D + d];
  return o;
}

// A (V, D) table given as its transpose (D, V), as the case passes x[0].t().
A transpose_ref(const A& a) {
  A o = ref::zeros({a.shape[1], a.shape[0]});
  for (int64_t i = 0; i < a.shape[0]; ++i)
    for (int64_t j = 0; j < a.shape[1]; ++j) o.v[j * a.shape[0] + i] = a.v[i * a.shape[1] + j];
  return o;
}

// softmax_j(q_i . k_j * scale, j <= i when causal) weighted sum of v_j, per batch slice:
// q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) -> (..., Tq, Dv). scale < 0: 1 / sqrt(D).
A attention_ref(const A& q, const A& k, const A& v, bool causal, double scale) {
  const size_t r = q.shape.size();
  const int64_t Tq = q.shape[r - 2], D = q.shape[r - 1], Tk = k.shape[r - 2], Dv = v.shape[r - 1];
  const int64_t batch = q.numel() / (Tq * D);
  if (scale < 0) scale = 1 / std::sqrt(double(D));
  Shape s = q.shape;
  s[r - 1] = Dv;
  A o = ref::zeros(s);
  for (int64_t b = 0; b < batch; ++b) {
    const double* qb = &q.v[b * Tq * D];
    const double* kb = &k.v[b * Tk * D];
    const double* vb = &v.v[b * Tk * Dv];
    for (int64_t i = 0; i < Tq; ++i) {
      const int64_t seen = causal ? std::min(i + 1, Tk) : Tk;  // keys 0 .. seen - 1
      std::vector<double> w(static_cast<size_t>(seen));
      double m = -INFINITY, total = 0;
      for (int64_t j = 0; j < seen; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qb[i * D + d] * kb[j * D + d];
        w[size_t(j)] = dot * scale;
        m = std::max(m, w[size_t(j)]);
      }
      for (double& x : w) total += (x = std::exp(x - m));
      for (int64_t e = 0; e < Dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < seen; ++j) acc += w[size_t(j)] / total * vb[j * Dv + e];
        o.v[(b * Tq + i) * Dv + e] = acc;
      }
    }
  }
  return o;
}

// (B, T, H, D) -> (B, H, T, D): the layout a transformer's heads come in.
A heads_ref(const A& a) {
  const int64_t B = a.shape[0], T = a.shape[1], H = a.shape[2], D = a.shape[3];
  A o = ref::zeros({B, H, T, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) o.at({b, h, t, d}) = a.at({b, t, h, d});
  return o;
}

OpCase attention_case(const std::string& name, Shape q, Shape k, Shape v, bool causal) {
  return OpCase{
      name,
      {{q}, {k}, {v}},
      [causal](const std::vector<Tensor>& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], causal);
      },
      [causal](const std::vector<A>& r) { return attention_ref(r[0], r[1], r[2], causal, -1); }};
}

}  // namespace

std::vector<OpCase> embedding_attention_cases() {
  std::vector<OpCase> cs;
  // ---- embedding: 12 ids over 5 rows repeat some rows (their gradients add up)
  cs.push_back({"embedding_repeated_ids",
                {{{5, 3}}, {{4, 3}, Init::Int, false, 5}},
                [](auto& x) { return embedding(x[0], x[1]); },
                [](auto& r) { return embedding_ref(r[0], r[1]); }});
  // A transposed (non-contiguous) table and 1-d ids.
  cs.push_back({"embedding_transposed_weight",
                {{{4, 6}}, {{9}, Init::Int, false, 6}},
                [](auto& x) { return embedding(x[0].t(), x[1]); },
                [](auto& r) { return embedding_ref(transpose_ref(r[0]), r[1]); }});
  cs.push_back({"embedding_3d_ids",
                {{{7, 2}}, {{2, 3, 4}, Init::Int, false, 7}},
                [](auto& x) { return embedding(x[0], x[1]); },
                [](auto& r) { return embedding_ref(r[0], r[1]); }});

  // ---- scaled_dot_product_attention
  cs.push_back(attention_case("sdpa_4d", {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, false));
  cs.push_back(attention_case("sdpa_4d_causal", {1, 2, 7, 4}, {1, 2, 7, 4}, {1, 2, 7, 3}, true));
  cs.push_back(
      attention_case("sdpa_4d_causal_tq5", {2, 2, 5, 3}, {2, 2, 5, 3}, {2, 2, 5, 2}, true));
  // Tq != Tk: PyTorch's top-left aligned causal mask (query i sees keys j <= i).
  cs.push_back(
      attention_case("sdpa_causal_tq_lt_tk", {1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 2}, true));
  cs.push_back(
      attention_case("sdpa_causal_tq_gt_tk", {1, 2, 7, 4}, {1, 2, 3, 4}, {1, 2, 3, 3}, true));
  cs.push_back(attention_case("sdpa_tq_ne_tk", {2, 1, 3, 4}, {2, 1, 5, 4}, {2, 1, 5, 3}, false));
  cs.push_back(attention_case("sdpa_3d", {3, 5, 4}, {3, 6, 4}, {3, 6, 2}, false));
  cs.push_back(attention_case("sdpa_3d_causal", {2, 7, 3}, {2, 7, 3}, {2, 7, 3}, true));
  // An explicit scale, and q, k, v split into heads by a view of (B, T, H, D) (strided inputs).
  cs.push_back({"sdpa_heads_view_scale",
                {{{2, 5, 3, 4}}, {{2, 5, 3, 4}}, {{2, 5, 3, 4}}},
                [](auto& x) {
                  return scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2),
                                                      x[2].transpose(1, 2), true, 0.3);
                },
                [](auto& r) {
                  return attention_ref(heads_ref(r[0]), heads_ref(r[1]), heads_ref(r[2]), true,
                                       0.3);
                }});
  return cs;
}

}  // namespace loom::testing
