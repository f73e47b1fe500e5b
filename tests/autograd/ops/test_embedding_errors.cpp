// Bad calls to embedding and to Backend::embedding_backward: each throws loom::Error whose message
// names the op and the offending value (an id and V, a dtype, a shape, a device).
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

Tensor ids(std::vector<int64_t> v) { return from_vector<int64_t>(v, {int64_t(v.size())}); }

TEST(EmbeddingErrors, IdOutOfRangeNamesTheIdAndV) {
  Tensor w = randn({5, 3});
  expect_error(
      [&] {
        embedding(w, ids({0, 5, 1}));
      },
      {"embedding", "id 5", "position 1", "5 rows", "[0, 5)"});
  expect_error([&] { embedding(w, ids({2, -1})); }, {"embedding", "id -1", "position 1"});
  // The position counts in the flattened ids.
  expect_error(
      [&] {
        embedding(w, from_vector<int64_t>({0, 1, 2, 9}, {2, 2}));
      },
      {"embedding", "id 9", "position 3"});
}

TEST(EmbeddingErrors, IdsMustBeInt64) {
  Tensor w = randn({5, 3});
  expect_error([&] { embedding(w, ids({0, 1}).to(kI32)); }, {"embedding", "int64", "int32"});
  expect_error([&] { embedding(w, randn({2})); }, {"embedding", "int64", "float32"});
}

TEST(EmbeddingErrors, WeightMustBeTwoDimensionalAndFloating) {
  expect_error([&] { embedding(randn({5}), ids({0})); }, {"embedding", "2-d", "[5]"});
  expect_error([&] { embedding(randn({2, 5, 3}), ids({0})); }, {"embedding", "2-d", "[2, 5, 3]"});
  expect_error(
      [&] {
        embedding(zeros({5, 3}, {.dtype = kI64}), ids({0}));
      },
      {"embedding", "floating", "int64"});
  expect_error([&] { embedding(Tensor(), ids({0})); }, {"embedding", "weight", "undefined"});
}

TEST(EmbeddingErrors, BackendMethodChecksIdsAndShapes) {
  Backend& be = backend_for(kCPU);
  expect_error(
      [&] {
        be.embedding_backward(randn({3, 2}), ids({0, 7, 1}), 4);
      },
      {"embedding_backward", "index 7", "position 1", "size 4"});
  expect_error(
      [&] {
        be.embedding_backward(randn({3, 2}), ids({0, 1}), 4);
      },
      {"embedding_backward", "[3, 2]", "[2]"});
}

}  // namespace
}  // namespace loom
