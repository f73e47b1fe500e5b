// Op-table cases: softmax and log_softmax (last, middle and leading dims, transposed inputs),
// nll_loss and cross_entropy (every Reduction, ignored rows, label smoothing), the classifier
// linear_cross_entropy, mse_loss, and
// index_select on a non-leading dim. Dropout is random: see test_dropout.cpp.
#include <cmath>

#include "op_table.h"

namespace loom::testing {

namespace {
using A = ref::Array;

// Softmax (or log-softmax) of `a` along `dim`, straight from the definition.
A softmax_ref(const A& a, int64_t dim, bool log) {
  A o = ref::zeros(a.shape);
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = ref::unravel(i, a.shape);
    double m = -INFINITY, s = 0;
    auto j_idx = idx;
    for (int64_t j = 0; j < a.shape[dim]; ++j) {
      j_idx[dim] = j;
      m = std::max(m, a.at(j_idx));
    }
    for (int64_t j = 0; j < a.shape[dim]; ++j) {
      j_idx[dim] = j;
      s += std::exp(a.at(j_idx) - m);
    }
    o.v[i] = log ? a.v[i] - m - std::log(s) : std::exp(a.v[i] - m) / s;
  }
  return o;
}

A transpose_ref(const A& a) {
  A o = ref::zeros({a.shape[1], a.shape[0]});
  for (int64_t i = 0; i < a.shape[0]; ++i)
    for (int64_t j = 0; j < a.shape[1]; ++j) o.v[j * a.shape[0] + i] = a.v[i * a.shape[1] + j];
  return o;
}

// Per-row cross-entropy with label smoothing ls (ls = 0: the plain nll of the log-softmax),
// then reduced; rows whose target is `ignore` count for nothing. logp_input: true when `a`
// already holds log-probabilities (nll_loss).
A class_loss_ref(const A& a, const A& target, Reduction r, double ls, int64_t ignore,
                 bool logp_input) {
  A logp = logp_input ? a : softmax_ref(a, 1, true);
  int64_t N = a.shape[0], C = a.shape[1];
  A rows = ref::zeros({N});
  double total = 0, count = 0;
  for (int64_t i = 0; i < N; ++i) {
    int64_t t = int64_t(target.v[i]);
    if (t == ignore) continue;
    double smooth = 0;
    for (int64_t c = 0; c < C; ++c) smooth -= logp.v[i * C + c] / double(C);
    rows.v[i] = (1 - ls) * -logp.v[i * C + t] + ls * smooth;
    total += rows.v[i];
    count += 1;
  }
  if (r == Reduction::None) return rows;
  return A{{}, {r == Reduction::Sum ? total : total / count}};
}

// target with row `row` replaced by `value` (an ignored row).
Tensor with_row(const Tensor& target, int64_t row, int64_t value) {
  auto v = target.to_vector<int64_t>();
  v[size_t(row)] = value;
  return from_vector<int64_t>(v, target.shape()).to(target.device());
}
A with_row(A target, int64_t row, int64_t value) {
  target.v[size_t(row)] = double(value);
  return target;
}

const char* reduction_name(Reduction r) {
  return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none";
}

}  // namespace

std::vector<OpCase> softmax_loss_cases() {
  std::vector<OpCase> cs;
  // ---- softmax / log_softmax
  cs.push_back({"softmax_last_dim",
                {{{4, 7}}},
                [](auto& x) { return softmax(x[0], -1); },
                [](auto& r) { return softmax_ref(r[0], 1, false); }});
  cs.push_back({"softmax_middle_dim",
                {{{3, 4, 5}}},
                [](auto& x) { return softmax(x[0], 1); },
                [](auto& r) { return softmax_ref(r[0], 1, false); }});
  cs.push_back({"softmax_dim0",
                {{{5, 3}}},
                [](auto& x) { return softmax(x[0], 0); },
                [](auto& r) { return softmax_ref(r[0], 0, false); }});
  // A transposed view: the softmax dim is last but not contiguous.
  cs.push_back({"softmax_transposed",
                {{{6, 4}}},
                [](auto& x) { return softmax(x[0].t(), 1); },
                [](auto& r) { return softmax_ref(transpose_ref(r[0]), 1, false); }});
  cs.push_back({"log_softmax_last_dim",
                {{{4, 6}}},
                [](auto& x) { return log_softmax(x[0], 1); },
                [](auto& r) { return softmax_ref(r[0], 1, true); }});
  cs.push_back({"log_softmax_middle_dim",
                {{{2, 5, 3}}},
                [](auto& x) { return log_softmax(x[0], -2); },
                [](auto& r) { return softmax_ref(r[0], 1, true); }});
  cs.push_back({"log_softmax_transposed",
                {{{5, 4}}},
                [](auto& x) { return log_softmax(x[0].t(), 0); },
                [](auto& r) { return softmax_ref(transpose_ref(r[0]), 0, true); }});

  // ---- nll_loss: each reduction, with one row ignored (the default -100, or a real class)
  for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (int64_t ignore : {int64_t(-100), int64_t(2)}) {
      std::string name = std::string("nll_loss_") + reduction_name(red) +
                         (ignore < 0 ? "_ignore_default" : "_ignore_class");
      cs.push_back({name,
                    {{{5, 4}}, {{5}, Init::Int, false, 4}},
                    [red, ignore](auto& x) {
                      return nll_loss(x[0], with_row(x[1], 3, ignore), red, ignore);
                    },
                    [red, ignore](auto& r) {
                      return class_loss_ref(r[0], with_row(r[1], 3, ignore), red, 0.0, ignore,
                                            true);
                    }});
    }
  }
  // log-probabilities from a transposed view, every row counted.
  cs.push_back({"nll_loss_of_log_softmax",
                {{{4, 6}}, {{6}, Init::Int, false, 4}},
                [](auto& x) { return nll_loss(log_softmax(x[0].t(), 1), x[1]); },
                [](auto& r) {
                  return class_loss_ref(transpose_ref(r[0]), r[1], Reduction::Mean, 0.0, -100,
                                        false);
                }});

  // ---- cross_entropy
  cs.push_back(
      {"cross_entropy_mean",
       {{{6, 5}}, {{6}, Init::Int, false, 5}},
       [](auto& x) { return cross_entropy(x[0], x[1]); },
       [](auto& r) { return class_loss_ref(r[0], r[1], Reduction::Mean, 0.0, -100, false); }});
  cs.push_back(
      {"cross_entropy_sum_ignore",
       {{{6, 5}}, {{6}, Init::Int, false, 5}},
       [](auto& x) { return cross_entropy(x[0], with_row(x[1], 0, -1), Reduction::Sum, 0.0, -1); },
       [](auto& r) {
         return class_loss_ref(r[0], with_row(r[1], 0, -1), Reduction::Sum, 0.0, -1, false);
       }});
  for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    std::string name = std::string("cross_entropy_smoothing_") + reduction_name(red);
    cs.push_back({name,
                  {{{5, 4}}, {{5}, Init::Int, false, 4}},
                  [red](auto& x) { return cross_entropy(x[0], with_row(x[1], 1, -100), red, 0.1); },
                  [red](auto& r) {
                    return class_loss_ref(r[0], with_row(r[1], 1, -100), red, 0.1, -100, false);
                  }});
  }
  cs.push_back({"cross_entropy_smoothing_transposed",
                {{{7, 3}}, {{3}, Init::Int, false, 7}},
                [](auto& x) { return cross_entropy(x[0].t(), x[1], Reduction::Mean, 0.25); },
                [](auto& r) {
                  return class_loss_ref(transpose_ref(r[0]), r[1], Reduction::Mean, 0.25, -100,
                                        false);
                }});

  // ---- linear_cross_entropy (Note [The classifier in one node]): x (..., K) against weight
  // (V, K), the logits x W^T made by the reference. 8 classes: on CUDA the one-pass kernel's
  // packs fit (float32, 4 a pack); 5 classes: CUDA composes the two kernels.
  auto logits_ref = [](const A& x, const A& w) {
    const int64_t K = w.shape[1], V = w.shape[0], M = x.numel() / K;
    A o = ref::zeros({M, V});
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < V; ++j)
        for (int64_t k = 0; k < K; ++k) o.v[i * V + j] += x.v[i * K + k] * w.v[j * K + k];
    return o;
  };
  cs.push_back({"linear_cross_entropy_mean",
                {{{6, 4}}, {{8, 4}}, {{6}, Init::Int, false, 8}},
                [](auto& x) { return linear_cross_entropy(x[0], x[1], x[2]); },
                [logits_ref](auto& r) {
                  return class_loss_ref(logits_ref(r[0], r[1]), r[2], Reduction::Mean, 0.0, -100,
                                        false);
                }});
  cs.push_back({"linear_cross_entropy_3d_sum_ignore_smoothing",
                {{{2, 3, 4}}, {{5, 4}}, {{2, 3}, Init::Int, false, 5}},
                [](auto& x) {
                  return linear_cross_entropy(x[0], x[1], with_row(x[2], 4, -1), Reduction::Sum,
                                              0.1, -1);
                },
                [logits_ref](auto& r) {
                  A t = with_row(r[2], 4, -1);
                  t.shape = {6};
                  return class_loss_ref(logits_ref(r[0], r[1]), t, Reduction::Sum, 0.1, -1, false);
                }});

  // Rows in chunks (Note [The classifier in chunks]): 7 rows by 3 (3, 3, 1), Mean over the rows
  // that count with one ignored; the Sum with smoothing by 2.
  cs.push_back({"linear_cross_entropy_chunked_mean_ignore",
                {{{7, 4}}, {{6, 4}}, {{7}, Init::Int, false, 6}},
                [](auto& x) {
                  return linear_cross_entropy(x[0], x[1], with_row(x[2], 4, -1), Reduction::Mean,
                                              0.0, -1, 3);
                },
                [logits_ref](auto& r) {
                  return class_loss_ref(logits_ref(r[0], r[1]), with_row(r[2], 4, -1),
                                        Reduction::Mean, 0.0, -1, false);
                }});
  cs.push_back(
      {"linear_cross_entropy_chunked_sum_smoothing",
       {{{5, 4}}, {{8, 4}}, {{5}, Init::Int, false, 8}},
       [](auto& x) { return linear_cross_entropy(x[0], x[1], x[2], Reduction::Sum, 0.1, -100, 2); },
       [logits_ref](auto& r) {
         return class_loss_ref(logits_ref(r[0], r[1]), r[2], Reduction::Sum, 0.1, -100, false);
       }});

  // ---- mse_loss: both arguments differentiable; one transposed
  auto sq_diff = [](const A& a, const A& b) {
    return ref::map2(a, b, [](double u, double v) { return (u - v) * (u - v); });
  };
  cs.push_back({"mse_loss_mean",
                {{{4, 3}}, {{3, 4}}},
                [](auto& x) { return mse_loss(x[0], x[1].t()); },
                [sq_diff](auto& r) {
                  A d = sq_diff(r[0], transpose_ref(r[1]));
                  return ref::reduce(d, {}, false, [](auto& g) {
                    double s = 0;
                    for (double v : g) s += v;
                    return s / double(g.size());
                  });
                }});
  cs.push_back({"mse_loss_sum",
                {{{2, 3, 2}}, {{2, 3, 2}}},
                [](auto& x) { return mse_loss(x[0], x[1], Reduction::Sum); },
                [sq_diff](auto& r) {
                  return ref::reduce(sq_diff(r[0], r[1]), {}, false, [](auto& g) {
                    double s = 0;
                    for (double v : g) s += v;
                    return s;
                  });
                }});
  cs.push_back({"mse_loss_none",
                {{{5}}, {{5}, Init::Normal, false}},
                [](auto& x) { return mse_loss(x[0], x[1], Reduction::None); },
                [sq_diff](auto& r) { return sq_diff(r[0], r[1]); }});

  // ---- index_select on a middle dim and on a transposed view (repeats accumulate in backward)
  cs.push_back(
      {"index_select_middle_dim",
       {{{2, 5, 3}}},
       [](auto& x) {
         return index_select(x[0], 1, from_vector<int64_t>({1, 1, 4, 0}, {4}).to(x[0].device()));
       },
       [](auto& r) {
         A o = ref::zeros({2, 4, 3});
         int64_t idx[] = {1, 1, 4, 0};
         for (int64_t i = 0; i < 2; ++i)
           for (int64_t k = 0; k < 4; ++k)
             for (int64_t j = 0; j < 3; ++j) o.at({i, k, j}) = r[0].at({i, idx[k], j});
         return o;
       }});
  cs.push_back(
      {"index_select_transposed",
       {{{4, 6}}},
       [](auto& x) {
         return index_select(x[0].t(), 1, from_vector<int64_t>({3, 0, 3}, {3}).to(x[0].device()));
       },
       [](auto& r) {
         A o = ref::zeros({6, 3});
         int64_t idx[] = {3, 0, 3};
         for (int64_t i = 0; i < 6; ++i)
           for (int64_t k = 0; k < 3; ++k) o.at({i, k}) = r[0].at({idx[k], i});
         return o;
       }});
  return cs;
}

}  // namespace loom::testing
