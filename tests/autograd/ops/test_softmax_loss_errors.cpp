// Bad calls to the softmax, loss and indexing ops: each must throw loom::Error whose message names
// the op and the offending value (a target, a dtype, a shape, a probability).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "support/errors.h"

using loom::test::expect_error;

namespace loom {
namespace {

Tensor targets(std::vector<int64_t> v) { return from_vector<int64_t>(v, {int64_t(v.size())}); }

TEST(LossErrors, NllLossTargetOutOfRange) {
  Tensor logp = randn({3, 4});
  expect_error(
      [&] {
        nll_loss(logp, targets({0, 7, 1}));
      },
      {"nll_loss", "target 7", "[0, 4)", "row 1"});
  expect_error([&] { nll_loss(logp, targets({0, 1, 4})); }, {"nll_loss", "target 4"});
}

TEST(LossErrors, NllLossNegativeTargetThatIsNotIgnored) {
  expect_error(
      [&] {
        nll_loss(randn({3, 4}), targets({0, -1, 1}), Reduction::Sum);
      },
      {"nll_loss", "target -1", "ignore_index is -100"});
  // The same value is fine once it is the ignore_index: row 1 then counts for nothing, in the
  // value, in the mean's denominator and in the gradient (-1 is not class C - 1, nor row 0's last).
  Tensor logp = from_vector<double>({-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12}, {3, 4});
  Tensor t = targets({0, -1, 1});
  EXPECT_EQ(nll_loss(logp, t, Reduction::Sum, -1).item(), 1.0 + 10.0);
  EXPECT_EQ(nll_loss(logp, t, Reduction::Mean, -1).item(), (1.0 + 10.0) / 2);
  EXPECT_EQ(nll_loss(logp, t, Reduction::None, -1).to_vector<double>(),
            (std::vector<double>{1, 0, 10}));
  Tensor lp = logp.clone().requires_grad_(true);
  nll_loss(lp, t, Reduction::Mean, -1).backward();
  EXPECT_EQ(lp.grad().to_vector<double>(),
            (std::vector<double>{-0.5, 0, 0, 0, 0, 0, 0, 0, 0, -0.5, 0, 0}));
}

// cross_entropy is log_softmax + nll_loss: the range check happens in the nll_loss kernel, which
// is where a GPU finds it too (no value is read back to the host to check it earlier); on the CPU
// the error is reported under the name the user called, about the logits.
TEST(LossErrors, CrossEntropyTargetOutOfRange) {
  expect_error(
      [&] {
        cross_entropy(randn({2, 10}), targets({12, 0}));
      },
      {"cross_entropy: target 12", "[0, 10)", "for logits float32 [2, 10]"});
}

TEST(LossErrors, WrongTargetDtype) {
  expect_error(
      [&] {
        nll_loss(randn({3, 4}), zeros({3}));
      },
      {"nll_loss", "target", "float32 [3]", "int64"});
  expect_error(
      [&] {
        cross_entropy(randn({3, 4}), zeros({3}, {.dtype = kI32}));
      },
      {"cross_entropy", "int32 [3]"});
}

TEST(LossErrors, BatchSizeMismatch) {
  expect_error(
      [&] {
        cross_entropy(randn({4, 3}), targets({0, 1, 2, 0, 1}));
      },
      {"cross_entropy", "N = 4", "float32 [4, 3]", "int64 [5]"});
  expect_error([&] { nll_loss(randn({2, 3}), targets({0})); }, {"nll_loss", "N = 2", "int64 [1]"});
}

TEST(LossErrors, LabelSmoothingOutOfRange) {
  Tensor logits = randn({2, 3});
  Tensor t = targets({0, 2});
  expect_error([&] { cross_entropy(logits, t, Reduction::Mean, 1.0); },
               {"cross_entropy", "label_smoothing", "got 1"});
  expect_error([&] { cross_entropy(logits, t, Reduction::Mean, -0.25); },
               {"cross_entropy", "-0.25"});
  expect_error([&] { cross_entropy(logits, t, Reduction::Mean, 1.5); }, {"cross_entropy", "1.5"});
}

TEST(LossErrors, WrongScoreDims) {
  expect_error([&] { cross_entropy(randn({5}), targets({0})); },
               {"cross_entropy", "logits", "float32 [5]", "(N, C)"});
  expect_error(
      [&] {
        nll_loss(randn({2, 3, 4}), targets({0, 1}));
      },
      {"nll_loss", "logp", "float32 [2, 3, 4]"});
  expect_error(
      [&] {
        cross_entropy(randn({2, 3}), zeros({2, 1}, {.dtype = kI64}));
      },
      {"cross_entropy", "1-d", "int64 [2, 1]"});
}

TEST(LossErrors, IntegerScores) {
  expect_error(
      [&] {
        cross_entropy(arange(6).view({2, 3}), targets({0, 1}));
      },
      {"cross_entropy", "int64 [2, 3]"});
  expect_error([&] { softmax(arange(4), 0); }, {"softmax", "floating", "int64 [4]"});
  expect_error([&] { log_softmax(arange(4), 0); }, {"log_softmax", "int64 [4]"});
}

TEST(LossErrors, SoftmaxDimOutOfRange) {
  expect_error([&] { softmax(randn({2, 3}), 2); }, {"softmax", "dim 2", "2 dims"});
  expect_error([&] { log_softmax(randn({2, 3}), -3); }, {"log_softmax", "dim -3"});
}

TEST(LossErrors, MseLossMismatch) {
  expect_error(
      [&] {
        mse_loss(randn({2, 3}), randn({3, 2}));
      },
      {"mse_loss", "float32 [2, 3]", "float32 [3, 2]"});
  expect_error([&] { mse_loss(randn({2}), randn({2}, {.dtype = kF64})); },
               {"mse_loss", "float64 [2]"});
}

TEST(LossErrors, UndefinedInputs) {
  expect_error([&] { softmax(Tensor(), 0); }, {"softmax", "undefined"});
  expect_error(
      [&] {
        cross_entropy(randn({2, 3}), Tensor());
      },
      {"cross_entropy", "target", "undefined"});
}

TEST(IndexErrors, IndexOutOfRange) {
  Tensor x = randn({3, 4});
  expect_error(
      [&] {
        index_select(x, 0, targets({0, 5}));
      },
      {"index_select", "index 5", "dim 0 of size 3"});
  expect_error([&] { index_select(x, 1, targets({-1})); }, {"index_select", "index -1", "size 4"});
  Backend& cpu = backend_for(Device());
  expect_error(
      [&] {
        cpu.index_add({3, 2}, 0, targets({1, 3}), randn({2, 2}));
      },
      {"index_add", "index 3", "size 3"});
  expect_error(
      [&] {
        cpu.index_add({3, 2}, 0, targets({1, 2}), randn({3, 2}));
      },
      {"index_add", "float32 [3, 2]"});
}

}  // namespace
}  // namespace loom
