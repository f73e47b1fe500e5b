// Bad calls: every one raises loom::Error whose message names the op and the offending values.
#include <gtest/gtest.h>

#include <functional>

#include "autograd/ops/ops.h"
#include "core/tensor_views.h"
#include "support/errors.h"

using namespace loom;

namespace {

// test::expect_error, and the message also carries the file:line of the check that threw.
void expect_located_error(const std::function<void()>& f, std::vector<std::string> parts) {
  parts.push_back("(at ");
  test::expect_error(f, parts);
}

Tensor f32(Shape s) { return randn(s); }

}  // namespace

TEST(BadCalls, MatmulShapeMismatch) {
  expect_located_error([] { mm(f32({2, 3}), f32({4, 5})); }, {"mm", "[2, 3]", "[4, 5]"});
}
TEST(BadCalls, MatmulNot2d) {
  expect_located_error([] { mm(f32({2, 3, 4}), f32({4, 5})); }, {"mm", "2 dims", "[2, 3, 4]"});
}
TEST(BadCalls, MatmulBatchedMismatch) {
  expect_located_error(
      [] {
        matmul(f32({2, 3, 4}), f32({2, 5, 6}));
      },
      {"matmul", "[2, 3, 4]", "[2, 5, 6]"});
}
TEST(BadCalls, MatmulVectorsOfDifferentLength) {
  expect_located_error([] { matmul(f32({3}), f32({4})); }, {"matmul", "3", "4"});
}
TEST(BadCalls, BmmBatchMismatch) {
  expect_located_error(
      [] {
        bmm(f32({2, 3, 4}), f32({3, 4, 5}));
      },
      {"bmm", "[2, 3, 4]", "[3, 4, 5]"});
}
TEST(BadCalls, BroadcastFails) {
  expect_located_error([] { add(f32({2, 3}), f32({4})); }, {"add", "[2, 3]", "[4]", "broadcast"});
}
TEST(BadCalls, DtypeMix) {
  expect_located_error([] { mul(f32({2}), randn({2}, {.dtype = kF64})); },
                       {"mul", "float32", "float64"});
}
TEST(BadCalls, IntegerExp) {
  expect_located_error([] { exp(arange(0, 3)); }, {"exp", "int64"});
}
TEST(BadCalls, IntegerDivision) {
  expect_located_error([] { div(arange(0, 3), arange(1, 4)); }, {"div", "integer"});
}
TEST(BadCalls, MeanOfIntegers) {
  expect_located_error([] { mean(arange(0, 3)); }, {"mean", "int64"});
}
TEST(BadCalls, SumDimOutOfRange) {
  expect_located_error([] { sum(f32({2, 3}), {2}); }, {"sum", "dim 2", "2 dims"});
}
TEST(BadCalls, SumDimRepeats) {
  expect_located_error([] { sum(f32({2, 3}), {1, -1}); }, {"sum", "repeats"});
}
TEST(BadCalls, ArgmaxDimOutOfRange) {
  expect_located_error([] { argmax(f32({2, 3}), -3); }, {"argmax", "dim -3"});
}
TEST(BadCalls, ReshapeToWrongSize) {
  expect_located_error([] { f32({2, 3}).reshape({4, 2}); }, {"reshape", "[4, 2]", "6 elements"});
}
TEST(BadCalls, ReshapeTwoInferred) {
  expect_located_error([] { f32({2, 3}).reshape({-1, -1}); }, {"reshape", "-1"});
}
TEST(BadCalls, ViewOfNonContiguous) {
  expect_located_error([] { f32({2, 3}).t().view({6}); }, {"view", "[3, 2]", "reshape"});
}
TEST(BadCalls, PermuteWrongRank) {
  expect_located_error([] { f32({2, 3}).permute({0}); }, {"permute", "[2, 3]"});
}
TEST(BadCalls, PermuteRepeatedDim) {
  expect_located_error([] { f32({2, 3}).permute({1, 1}); }, {"permute", "repeats"});
}
TEST(BadCalls, TransposeDimOutOfRange) {
  expect_located_error([] { f32({2, 3}).transpose(0, 5); }, {"transpose", "dim 5"});
}
TEST(BadCalls, SelectIndexOutOfRange) {
  expect_located_error([] { f32({2, 3}).select(1, 3); }, {"select", "index 3", "size 3"});
}
TEST(BadCalls, ExpandIncompatible) {
  expect_located_error([] { f32({2, 3}).expand({2, 4}); }, {"expand", "[2, 3]", "[2, 4]"});
}
TEST(BadCalls, CatShapeMismatch) {
  expect_located_error([] { cat({f32({2, 3}), f32({2, 4})}, 0); }, {"cat", "[2, 4]", "[2, 3]"});
}
TEST(BadCalls, CatEmptyList) {
  expect_located_error([] { cat({}, 0); }, {"cat", "at least one"});
}
TEST(BadCalls, StackShapeMismatch) {
  expect_located_error([] { stack({f32({2}), f32({3})}); }, {"stack", "[3]", "[2]"});
}
TEST(BadCalls, IndexSelectWrongIndexDtype) {
  expect_located_error(
      [] {
        index_select(f32({4, 2}), 0, from_vector<int32_t>({0}, {1}));
      },
      {"index_select", "int32"});
}
TEST(BadCalls, WhereConditionNotBool) {
  expect_located_error([] { where(f32({2}), f32({2}), f32({2})); }, {"where", "bool", "float32"});
}
TEST(BadCalls, LinearFeatureMismatch) {
  expect_located_error([] { linear(f32({5, 3}), f32({2, 4})); }, {"linear", "[5, 3]", "[2, 4]"});
}
TEST(BadCalls, LinearBiasMismatch) {
  expect_located_error(
      [] {
        linear(f32({5, 4}), f32({2, 4}), f32({3}));
      },
      {"linear", "bias", "[3]"});
}
TEST(BadCalls, BackwardOnTensorWithoutGrad) {
  expect_located_error([] { f32({1}).backward(); }, {"backward", "does not require grad"});
}
TEST(BadCalls, BackwardOnNonScalar) {
  expect_located_error([] { (randn({3}, {.requires_grad = true}) * 2.0).backward(); },
                       {"backward", "[3]", "one-element"});
}
TEST(BadCalls, RequiresGradOnIntegers) {
  expect_located_error([] { arange(0, 3).requires_grad_(); }, {"requires_grad_", "int64"});
}
TEST(BadCalls, RequiresGradOnNonLeaf) {
  expect_located_error([] { (randn({2}, {.requires_grad = true}) * 2.0).requires_grad_(false); },
                       {"requires_grad_", "leaf"});
}
TEST(BadCalls, ItemOfManyElements) {
  expect_located_error([] { f32({2, 2}).item(); }, {"item", "[2, 2]"});
}
TEST(BadCalls, DataWithWrongType) {
  expect_located_error([] { f32({2}).data<double>(); }, {"data<float64>", "float32"});
}
TEST(BadCalls, FromVectorWrongCount) {
  expect_located_error(
      [] {
        from_vector<float>({1, 2, 3}, {2, 2});
      },
      {"from_vector", "3 values", "[2, 2]"});
}
TEST(BadCalls, NegativeShape) {
  expect_located_error([] { empty({2, -1}); }, {"empty", "[2, -1]"});
}
TEST(BadCalls, RandintEmptyRange) {
  expect_located_error([] { randint(5, 5, {2}); }, {"randint", "5"});
}
TEST(BadCalls, UnknownDevice) {
  expect_located_error([] { Device("gpu:0"); }, {"Device", "gpu:0"});
}
TEST(BadCalls, UndefinedTensorInput) {
  expect_located_error([] { exp(Tensor()); }, {"exp", "undefined"});
}
TEST(BadCalls, CopyShapeMismatch) {
  expect_located_error(
      [] {
        NoGradGuard g;
        f32({2, 3}).copy_(f32({4}));
      },
      {"copy_", "[4]", "[2, 3]"});
}
TEST(BadCalls, VarWithoutDegreesOfFreedom) {
  expect_located_error([] { var(f32({1})); }, {"var", "correction 1"});
}
