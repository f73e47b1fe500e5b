// Bad calls to scaled_dot_product_attention: each throws loom::Error whose message names the op and
// the offending shapes, dtypes or value (rank, batch, head size, lengths, dtype, dropout_p, scale).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "support/errors.h"

namespace loom {
using loom::test::expect_error;

namespace {

const char* kOp = "scaled_dot_product_attention";

TEST(AttentionErrors, Rank) {
  expect_error(
      [] {
        scaled_dot_product_attention(randn({5, 4}), randn({5, 4}), randn({5, 4}));
      },
      {kOp, "4-d", "3-d", "[5, 4]"});
  expect_error(
      [] {
        scaled_dot_product_attention(randn({1, 2, 5, 4}), randn({2, 5, 4}), randn({2, 5, 4}));
      },
      {kOp, "one rank", "[1, 2, 5, 4]", "[2, 5, 4]"});
}

TEST(AttentionErrors, MismatchedBatchOrHeads) {
  expect_error(
      [] {
        scaled_dot_product_attention(randn({2, 3, 5, 4}), randn({2, 2, 5, 4}), randn({2, 3, 5, 4}));
      },
      {kOp, "(B, H)", "[2, 3, 5, 4]", "[2, 2, 5, 4]"});
  expect_error(
      [] {
        scaled_dot_product_attention(randn({2, 5, 4}), randn({2, 5, 4}), randn({3, 5, 4}));
      },
      {kOp, "(N)", "[3, 5, 4]"});
}

TEST(AttentionErrors, MismatchedHeadSizeOrLength) {
  expect_error(
      [] {
        scaled_dot_product_attention(randn({1, 2, 5, 4}), randn({1, 2, 5, 3}), randn({1, 2, 5, 4}));
      },
      {kOp, "head size D", "[1, 2, 5, 4]", "[1, 2, 5, 3]"});
  expect_error(
      [] {
        scaled_dot_product_attention(randn({1, 2, 5, 4}), randn({1, 2, 6, 4}), randn({1, 2, 5, 4}));
      },
      {kOp, "length Tk", "[1, 2, 6, 4]", "[1, 2, 5, 4]"});
}

TEST(AttentionErrors, DtypeMismatchAndIntegers) {
  expect_error(
      [] {
        scaled_dot_product_attention(randn({2, 5, 4}), randn({2, 5, 4}, {.dtype = kF64}),
                                     randn({2, 5, 4}));
      },
      {kOp, "one dtype", "float32", "float64"});
  Tensor i = zeros({2, 5, 4}, {.dtype = kI64});
  expect_error([&] { scaled_dot_product_attention(i, i, i); }, {kOp, "floating", "int64"});
}

TEST(AttentionErrors, DropoutOutsideZeroToOneAndBadScale) {
  Tensor x = randn({2, 5, 4});
  expect_error([&] { scaled_dot_product_attention(x, x, x, false, kDefaultScale, 1.0); },
               {kOp, "dropout_p", "[0, 1)", "got 1", "[2, 5, 4]"});
  expect_error([&] { scaled_dot_product_attention(x, x, x, true, kDefaultScale, -0.1); },
               {kOp, "dropout_p", "-0.1"});
  expect_error([&] { scaled_dot_product_attention(x, x, x, false, INFINITY); },
               {kOp, "scale", "inf"});
}

}  // namespace
}  // namespace loom
