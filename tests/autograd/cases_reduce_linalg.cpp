// Op-table cases: reductions and matrix products.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "op_table.h"

namespace loom::testing {

namespace {
using A = ref::Array;
double vsum(const std::vector<double>& g) { return std::accumulate(g.begin(), g.end(), 0.0); }
double vmean(const std::vector<double>& g) { return vsum(g) / double(g.size()); }
double vvar(const std::vector<double>& g) {
  double m = vmean(g), s = 0;
  for (double x : g) s += (x - m) * (x - m);
  return s / double(g.size() - 1);
}

// The float64 reference of linear: out (shape, rows x out_f) = x w^T + b, then max(., 0) with
// relu. x holds rows x in_f values (or in_f x rows when x_transposed), w out_f x in_f; b: out_f
// values or null.
A linear_ref(const A& x, const A& w, const A* b, Shape shape, int64_t rows, int64_t in_f,
             int64_t out_f, LinearActivation act, bool x_transposed = false) {
  A o = ref::zeros(shape);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out_f; ++j) {
      double s = b ? b->v[j] : 0.0;
      for (int64_t k = 0; k < in_f; ++k)
        s += x.v[x_transposed ? k * rows + i : i * in_f + k] * w.v[j * in_f + k];
      if (act == LinearActivation::Relu) s = s > 0 ? s : 0.0;
      if (act == LinearActivation::GeluTanh)  // 0.5 s (1 + tanh(sqrt(2/pi) (s + 0.044715 s^3)))
        s = 0.5 * s * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
      o.v[i * out_f + j] = s;
    }
  return o;
}
}  // namespace

std::vector<OpCase> reduce_cases() {
  std::vector<OpCase> cs;
  cs.push_back({"sum_all",
                {{{3, 4, 5}}},
                [](auto& x) { return sum(x[0]); },
                [](auto& r) { return ref::reduce(r[0], {}, false, vsum); }});
  cs.push_back({"sum_dims_keepdim",
                {{{3, 4, 5}}},
                [](auto& x) {
                  return sum(x[0], {0, -1}, true);
                },
                [](auto& r) {
                  return ref::reduce(r[0], {0, 2}, true, vsum);
                }});
  cs.push_back({"sum_leading_dim",
                {{{6, 5}}},
                [](auto& x) { return sum(x[0], {0}); },
                [](auto& r) { return ref::reduce(r[0], {0}, false, vsum); }});
  cs.push_back({"sum_transposed",
                {{{4, 5}}},
                [](auto& x) { return sum(x[0].t(), {1}); },
                [](auto& r) { return ref::reduce(r[0], {0}, false, vsum); }});
  cs.push_back({"mean_dim",
                {{{3, 4, 5}}},
                [](auto& x) { return mean(x[0], {1}); },
                [](auto& r) { return ref::reduce(r[0], {1}, false, vmean); }});
  cs.push_back({"mean_all",
                {{{7, 3}}},
                [](auto& x) { return x[0].mean(); },
                [](auto& r) { return ref::reduce(r[0], {}, false, vmean); }});
  cs.push_back({"var_dim",
                {{{4, 6}}},
                [](auto& x) { return var(x[0], {1}); },
                [](auto& r) { return ref::reduce(r[0], {1}, false, vvar); }});
  cs.push_back({"var_all_keepdim",
                {{{3, 5}}},
                [](auto& x) { return var(x[0], {}, 1, true); },
                [](auto& r) { return ref::reduce(r[0], {}, true, vvar); }});
  cs.push_back({"max_all",
                {{{3, 5}}},
                [](auto& x) { return max(x[0]); },
                [](auto& r) {
                  return ref::reduce(r[0], {}, false,
                                     [](auto& g) { return *std::max_element(g.begin(), g.end()); });
                }});
  cs.push_back({"min_all",
                {{{3, 5}}},
                [](auto& x) { return min(x[0]); },
                [](auto& r) {
                  return ref::reduce(r[0], {}, false,
                                     [](auto& g) { return *std::min_element(g.begin(), g.end()); });
                }});
  cs.push_back({"max_dim_values",
                {{{4, 5}}},
                [](auto& x) { return max(x[0].t(), 1).first; },
                [](auto& r) {
                  return ref::reduce(r[0], {0}, false,
                                     [](auto& g) { return *std::max_element(g.begin(), g.end()); });
                }});
  OpCase am{"argmax",
            {{{4, 5, 3}}},
            [](auto& x) { return argmax(x[0], 1, true); },
            [](auto& r) {
              return ref::reduce(r[0], {1}, true, [](auto& g) {
                return double(std::max_element(g.begin(), g.end()) - g.begin());
              });
            }};
  am.check_grad = false;
  cs.push_back(am);
  return cs;
}

std::vector<OpCase> linalg_cases() {
  std::vector<OpCase> cs;
  cs.push_back({"mm",
                {{{5, 7}}, {{7, 3}}},
                [](auto& x) { return mm(x[0], x[1]); },
                [](auto& r) { return ref::matmul2d(r[0], r[1]); }});
  // Both operands transposed views: the GEMM must read them as column-major.
  cs.push_back({"mm_transposed",
                {{{7, 5}}, {{3, 7}}},
                [](auto& x) { return mm(x[0].t(), x[1].t()); },
                [](auto& r) {
                  A a = ref::zeros({5, 7}), b = ref::zeros({7, 3});
                  for (int i = 0; i < 5; ++i)
                    for (int k = 0; k < 7; ++k) a.v[i * 7 + k] = r[0].v[k * 5 + i];
                  for (int k = 0; k < 7; ++k)
                    for (int j = 0; j < 3; ++j) b.v[k * 3 + j] = r[1].v[j * 7 + k];
                  return ref::matmul2d(a, b);
                }});
  cs.push_back({"mm_sliced",
                {{{5, 8}}, {{4, 3}}},
                [](auto& x) { return mm(x[0].slice(1, 2, 6), x[1]); },
                [](auto& r) {
                  A a = ref::zeros({5, 4});
                  for (int i = 0; i < 5; ++i)
                    for (int k = 0; k < 4; ++k) a.v[i * 4 + k] = r[0].v[i * 8 + 2 + k];
                  return ref::matmul2d(a, r[1]);
                }});
  cs.push_back({"bmm",
                {{{2, 3, 4}}, {{2, 4, 5}}},
                [](auto& x) { return bmm(x[0], x[1]); },
                [](auto& r) {
                  A o = ref::zeros({2, 3, 5});
                  for (int b = 0; b < 2; ++b)
                    for (int i = 0; i < 3; ++i)
                      for (int j = 0; j < 5; ++j) {
                        double s = 0;
                        for (int k = 0; k < 4; ++k)
                          s += r[0].v[b * 12 + i * 4 + k] * r[1].v[b * 20 + k * 5 + j];
                        o.v[b * 15 + i * 5 + j] = s;
                      }
                  return o;
                }});
  cs.push_back({"matmul_batched_broadcast",
                {{{2, 1, 3, 4}}, {{3, 4, 2}}},
                [](auto& x) { return matmul(x[0], x[1]); },
                [](auto& r) {
                  A o = ref::zeros({2, 3, 3, 2});
                  for (int p = 0; p < 2; ++p)
                    for (int q = 0; q < 3; ++q)
                      for (int i = 0; i < 3; ++i)
                        for (int j = 0; j < 2; ++j) {
                          double s = 0;
                          for (int k = 0; k < 4; ++k)
                            s += r[0].v[p * 12 + i * 4 + k] * r[1].v[q * 8 + k * 2 + j];
                          o.v[((p * 3 + q) * 3 + i) * 2 + j] = s;
                        }
                  return o;
                }});
  cs.push_back({"matmul_vector",
                {{{3, 4}}, {{4}}},
                [](auto& x) { return matmul(x[0], x[1]); },
                [](auto& r) {
                  A o = ref::zeros({3});
                  for (int i = 0; i < 3; ++i)
                    for (int k = 0; k < 4; ++k) o.v[i] += r[0].v[i * 4 + k] * r[1].v[k];
                  return o;
                }});
  cs.push_back({"linear",
                {{{6, 4}}, {{3, 4}}, {{3}}},
                [](auto& x) { return linear(x[0], x[1], x[2]); },
                [](auto& r) {
                  return linear_ref(r[0], r[1], &r[2], {6, 3}, 6, 4, 3, LinearActivation::None);
                }});
  // The fused forms (Note [Fused linear]): the ReLU epilogue, no bias, a 3-d input folded into
  // rows, and a transposed (non-contiguous) input.
  cs.push_back({"linear_relu",
                {{{6, 4}}, {{3, 4}}, {{3}}},
                [](auto& x) { return linear(x[0], x[1], x[2], LinearActivation::Relu); },
                [](auto& r) {
                  return linear_ref(r[0], r[1], &r[2], {6, 3}, 6, 4, 3, LinearActivation::Relu);
                }});
  cs.push_back(
      {"linear_relu_3d_no_bias",
       {{{2, 5, 4}}, {{3, 4}}},
       [](auto& x) { return linear(x[0], x[1], Tensor(), LinearActivation::Relu); },
       [](auto& r) {
         return linear_ref(r[0], r[1], nullptr, {2, 5, 3}, 10, 4, 3, LinearActivation::Relu);
       }});
  // GELU (tanh) in the epilogue: 8 outputs, so that on CUDA the pre-activation comes from
  // cuBLASLt's aux output (a multiple of 8 wide), and 3 outputs, where CUDA composes.
  cs.push_back({"linear_gelu_tanh",
                {{{6, 4}}, {{8, 4}}, {{8}}},
                [](auto& x) { return linear(x[0], x[1], x[2], LinearActivation::GeluTanh); },
                [](auto& r) {
                  return linear_ref(r[0], r[1], &r[2], {6, 8}, 6, 4, 8, LinearActivation::GeluTanh);
                }});
  cs.push_back(
      {"linear_gelu_tanh_3d_no_bias",
       {{{2, 5, 4}}, {{3, 4}}},
       [](auto& x) { return linear(x[0], x[1], Tensor(), LinearActivation::GeluTanh); },
       [](auto& r) {
         return linear_ref(r[0], r[1], nullptr, {2, 5, 3}, 10, 4, 3, LinearActivation::GeluTanh);
       }});
  // GPT-2's MLP as one op (Note [Fused MLP]): hidden width 8, so that on CUDA the GELU's
  // backward runs in cuBLASLt's DGELU epilogue, with and without biases, 3-d input.
  cs.push_back({"gelu_mlp",
                {{{6, 4}}, {{8, 4}}, {{8}}, {{3, 8}}, {{3}}},
                [](auto& x) { return gelu_mlp(x[0], x[1], x[2], x[3], x[4]); },
                [](auto& r) {
                  A h = linear_ref(r[0], r[1], &r[2], {6, 8}, 6, 4, 8, LinearActivation::GeluTanh);
                  return linear_ref(h, r[3], &r[4], {6, 3}, 6, 8, 3, LinearActivation::None);
                }});
  cs.push_back(
      {"gelu_mlp_3d_no_bias",
       {{{2, 5, 4}}, {{8, 4}}, {{3, 8}}},
       [](auto& x) { return gelu_mlp(x[0], x[1], Tensor(), x[2], Tensor()); },
       [](auto& r) {
         A h = linear_ref(r[0], r[1], nullptr, {10, 8}, 10, 4, 8, LinearActivation::GeluTanh);
         return linear_ref(h, r[2], nullptr, {2, 5, 3}, 10, 8, 3, LinearActivation::None);
       }});
  cs.push_back({"linear_transposed_input",
                {{{4, 6}}, {{3, 4}}, {{3}}},
                [](auto& x) { return linear(x[0].t(), x[1], x[2]); },
                [](auto& r) {
                  return linear_ref(r[0], r[1], &r[2], {6, 3}, 6, 4, 3, LinearActivation::None,
                                    /*x_transposed=*/true);
                }});
  return cs;
}

}  // namespace loom::testing
