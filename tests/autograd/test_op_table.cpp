// Runs every case of the per-op table (see op_table.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autograd/gradcheck.h"
#include "op_table.h"

namespace loom::testing {

std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, bool requires_grad) {
  Generator gen(std::hash<std::string>{}(c.name));
  std::vector<Tensor> xs;
  for (const InputSpec& s : c.inputs) {
    Tensor t;
    if (s.init == Init::Int) {
      t = randint(0, s.int_high, s.shape, {.dtype = DType::I64}, &gen);
    } else {
      t = s.init == Init::Positive ? uniform(s.shape, 0.5, 2.0, {.dtype = DType::F64}, &gen)
                                   : randn(s.shape, {.dtype = DType::F64}, &gen);
      t = t.to(dtype);  // the same values in every dtype (rounded)
      if (requires_grad && s.grad) t.requires_grad_(true);
    }
    xs.push_back(t);
  }
  return xs;
}

namespace {

std::vector<OpCase> all_cases() {
  std::vector<OpCase> all;
  for (auto* family :
       {&elementwise_cases, &reduce_cases, &linalg_cases, &shape_cases, &softmax_loss_cases,
        &conv_pool_norm_cases, &embedding_attention_cases, &llama_cases}) {
    auto cs = (*family)();
    all.insert(all.end(), cs.begin(), cs.end());
  }
  return all;
}

void expect_close(const ref::Array& want, const Tensor& got, double tol, bool relative,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape) << what << ": shape";
  std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    double scale = relative ? std::max(1.0, std::fabs(want.v[i])) : 1.0;
    ASSERT_LE(std::fabs(g[i] - want.v[i]), tol * scale)
        << what << ": element " << i << " is " << g[i] << ", reference " << want.v[i];
  }
}

class OpTable : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTable, ForwardFloat64MatchesReference) {
  const OpCase& c = GetParam();
  auto xs = make_inputs(c, DType::F64, false);
  std::vector<ref::Array> rs;
  for (auto& x : xs) rs.push_back(ref::from(x));
  expect_close(c.reference(rs), c.op(xs), c.tol64, true, c.name + " f64");
}

TEST_P(OpTable, ForwardFloat32MatchesReference) {
  const OpCase& c = GetParam();
  auto xs = make_inputs(c, DType::F32, false);
  std::vector<ref::Array> rs;
  for (auto& x : xs) rs.push_back(ref::from(x));  // the reference sees the rounded inputs
  Tensor out = c.op(xs);
  if (out.is_floating_point()) {
    EXPECT_EQ(out.dtype(), DType::F32) << c.name;
  }
  expect_close(c.reference(rs), out, c.tol32, true, c.name + " f32");
}

TEST_P(OpTable, GradientMatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  auto xs = make_inputs(c, DType::F64, true);
  if (!c.check_grad) {  // not differentiable: the result must carry no graph
    EXPECT_FALSE(c.op(xs).requires_grad()) << c.name;
    return;
  }
  auto r = autograd::gradcheck(c.op, xs);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace loom::testing
