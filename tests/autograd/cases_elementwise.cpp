// Op-table cases: elementwise ops, with broadcasting and non-contiguous inputs.
#include <cmath>

#include "op_table.h"

namespace loom::testing {

namespace {

using A = ref::Array;

OpCase unary_case(const std::string& name, Init init, Tensor (*op)(const Tensor&),
                  double (*f)(double)) {
  return OpCase{name,
                {{{3, 5}, init}},
                [op](const std::vector<Tensor>& x) { return op(x[0].t()); },  // transposed input
                [f](const std::vector<A>& r) {
                  A t = ref::zeros({r[0].shape[1], r[0].shape[0]});
                  for (int64_t i = 0; i < r[0].shape[0]; ++i)
                    for (int64_t j = 0; j < r[0].shape[1]; ++j)
                      t.v[j * r[0].shape[0] + i] = f(r[0].v[i * r[0].shape[1] + j]);
                  return t;
                }};
}

OpCase binary_case(const std::string& name, Shape sa, Shape sb, Init init_b,
                   Tensor (*op)(const Tensor&, const Tensor&), double (*f)(double, double)) {
  return OpCase{name,
                {{sa}, {sb, init_b}},
                [op](const std::vector<Tensor>& x) { return op(x[0], x[1]); },
                [f](const std::vector<A>& r) { return ref::map2(r[0], r[1], f); }};
}

double relu_ref(double x) { return x > 0 ? x : 0; }
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
}
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

}  // namespace

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cs;
  cs.push_back(binary_case("add_broadcast", {4, 1, 3}, {5, 1}, Init::Normal, &add,
                           [](double a, double b) { return a + b; }));
  cs.push_back(binary_case("sub_broadcast", {2, 3}, {3}, Init::Normal, &sub,
                           [](double a, double b) { return a - b; }));
  cs.push_back(binary_case("mul_broadcast", {3, 4}, {3, 1}, Init::Normal, &mul,
                           [](double a, double b) { return a * b; }));
  cs.push_back(binary_case("div_broadcast", {2, 3}, {1, 3}, Init::Positive, &div,
                           [](double a, double b) { return a / b; }));
  cs.push_back(OpCase{"pow_tensor",
                      {{{2, 3}, Init::Positive}, {{2, 3}}},
                      [](const std::vector<Tensor>& x) { return pow(x[0], x[1]); },
                      [](const std::vector<A>& r) {
                        return ref::map2(r[0], r[1],
                                         [](double a, double b) { return std::pow(a, b); });
                      },
                      1e-10,
                      1e-4});
  cs.push_back(binary_case("maximum", {3, 4}, {4}, Init::Normal, &maximum,
                           [](double a, double b) { return a >= b ? a : b; }));
  cs.push_back(binary_case("minimum", {3, 4}, {3, 4}, Init::Normal, &minimum,
                           [](double a, double b) { return a <= b ? a : b; }));
  // A non-contiguous, broadcast pair: a sliced view with step 2 against an expanded row.
  cs.push_back(OpCase{"mul_strided",
                      {{{4, 6}}, {{1, 3}}},
                      [](const std::vector<Tensor>& x) {
                        return mul(x[0].slice(1, 0, 6, 2), x[1].expand({4, 3}));
                      },
                      [](const std::vector<A>& r) {
                        A o = ref::zeros({4, 3});
                        for (int64_t i = 0; i < 4; ++i)
                          for (int64_t j = 0; j < 3; ++j)
                            o.v[i * 3 + j] = r[0].v[i * 6 + 2 * j] * r[1].v[j];
                        return o;
                      }});
  cs.push_back(OpCase{"scalar_ops",
                      {{{2, 3}, Init::Positive}},
                      [](const std::vector<Tensor>& x) {
                        return (x[0] * 3.0 + 1.0) / 2.0 - 0.5 + 2.0 / x[0] + (1.0 - x[0]) +
                               pow(x[0], 1.5);
                      },
                      [](const std::vector<A>& r) {
                        return ref::map(r[0], [](double a) {
                          return (a * 3 + 1) / 2 - 0.5 + 2 / a + (1 - a) + std::pow(a, 1.5);
                        });
                      }});
  cs.push_back(unary_case("neg", Init::Normal, &neg, [](double x) { return -x; }));
  cs.push_back(unary_case("abs", Init::Normal, &abs, [](double x) { return std::fabs(x); }));
  cs.push_back(unary_case("square", Init::Normal, &square, [](double x) { return x * x; }));
  cs.push_back(unary_case("exp", Init::Normal, &exp, [](double x) { return std::exp(x); }));
  cs.push_back(unary_case("log", Init::Positive, &log, [](double x) { return std::log(x); }));
  cs.push_back(unary_case("sqrt", Init::Positive, &sqrt, [](double x) { return std::sqrt(x); }));
  cs.push_back(
      unary_case("rsqrt", Init::Positive, &rsqrt, [](double x) { return 1 / std::sqrt(x); }));
  cs.push_back(unary_case("relu", Init::Normal, &relu, &relu_ref));
  cs.push_back(unary_case("gelu", Init::Normal, &gelu, &gelu_ref));
  cs.push_back(unary_case("gelu_tanh", Init::Normal, &gelu_tanh, &gelu_tanh_ref));
  cs.push_back(unary_case("sigmoid", Init::Normal, &sigmoid, &sigmoid_ref));
  cs.push_back(unary_case("tanh", Init::Normal, &tanh, [](double x) { return std::tanh(x); }));
  cs.push_back(
      unary_case("silu", Init::Normal, &silu, [](double x) { return x / (1 + std::exp(-x)); }));
  // Comparisons and where.
  for (auto [name, op, f] :
       std::vector<std::tuple<const char*, Tensor (*)(const Tensor&, const Tensor&),
                              double (*)(double, double)>>{
           {"eq", &eq, [](double a, double b) { return double(a == b); }},
           {"ne", &ne, [](double a, double b) { return double(a != b); }},
           {"lt", &lt, [](double a, double b) { return double(a < b); }},
           {"le", &le, [](double a, double b) { return double(a <= b); }},
           {"gt", &gt, [](double a, double b) { return double(a > b); }},
           {"ge", &ge, [](double a, double b) { return double(a >= b); }}}) {
    OpCase c{name,
             {{{3, 4}}, {{4}}},
             // Compare against a copy with some equal elements, so eq/le/ge see ties.
             [op = op](const std::vector<Tensor>& x) {
               return op(x[0], where(gt(x[1], 0.0), x[0].select(0, 1), x[1]));
             },
             [f = f](const std::vector<A>& r) {
               A o = ref::zeros({3, 4});
               for (int64_t i = 0; i < 3; ++i)
                 for (int64_t j = 0; j < 4; ++j) {
                   double b = r[1].v[j] > 0 ? r[0].v[4 + j] : r[1].v[j];
                   o.v[i * 4 + j] = f(r[0].v[i * 4 + j], b);
                 }
               return o;
             }};
    c.check_grad = false;
    cs.push_back(c);
  }
  cs.push_back(OpCase{"where",
                      {{{3, 4}, Init::Normal, false}, {{3, 4}}, {{4}}},
                      [](const std::vector<Tensor>& x) { return where(gt(x[0], 0.0), x[1], x[2]); },
                      [](const std::vector<A>& r) {
                        A o = ref::zeros({3, 4});
                        for (int64_t i = 0; i < 12; ++i)
                          o.v[i] = r[0].v[i] > 0 ? r[1].v[i] : r[2].v[i % 4];
                        return o;
                      }});
  return cs;
}

}  // namespace loom::testing
