// Tensor::index_copy_ on the CPU (kernels/cpu/cpu_index.cpp) against a copy written here row by
// row: every dim (and a negative one), 1-, 2- and 8-byte elements, a repeated index (its last row
// lands), the rows not indexed left as they were, the version counter, and the errors (an index
// out of range, a source of the wrong shape or dtype, a strided destination, a parameter outside
// NoGradGuard).
#include <gtest/gtest.h>

#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "support/errors.h"

namespace loom {
namespace {

// dst (outer, n, inner) with src's runs (outer, K, inner) at rows index[k] of the middle axis.
std::vector<double> naive_index_copy(std::vector<double> dst, const std::vector<double>& src,
                                     const std::vector<int64_t>& index, int64_t outer, int64_t n,
                                     int64_t inner) {
  const int64_t K = int64_t(index.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < inner; ++i)
        dst[size_t((o * n + index[size_t(k)]) * inner + i)] = src[size_t((o * K + k) * inner + i)];
  return dst;
}

std::vector<double> values(const Tensor& t) { return to(t, kF64).to_vector<double>(); }

TEST(CpuIndexCopy, EveryDimAgainstTheRowByRowCopy) {
  const Shape shape{3, 5, 4};
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int64_t d = dim < 0 ? dim + 3 : dim, n = shape[size_t(d)];
    const std::vector<int64_t> rows{n - 1, 0, n / 2};  // out of order; the rest stay
    Shape src_shape = shape;
    src_shape[size_t(d)] = int64_t(rows.size());
    Tensor dst = randn(shape, {.dtype = kF64}), src = randn(src_shape, {.dtype = kF64});
    int64_t outer = 1, inner = 1;
    for (int64_t a = 0; a < d; ++a) outer *= shape[size_t(a)];
    for (int64_t a = d + 1; a < 3; ++a) inner *= shape[size_t(a)];
    const std::vector<double> want =
        naive_index_copy(values(dst), values(src), rows, outer, shape[size_t(d)], inner);
    const uint64_t version = dst.version();
    dst.index_copy_(dim, from_vector<int64_t>(rows, {int64_t(rows.size())}), src);
    EXPECT_EQ(values(dst), want);
    EXPECT_GT(dst.version(), version);
  }
}

TEST(CpuIndexCopy, ElementsOfOneTwoAndEightBytesAndARepeatedIndex) {
  for (DType dt : {kBool, kBF16, kI64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor dst = to(gt(randn({2, 6, 3}), 0.0), dt), src = to(gt(randn({2, 3, 3}), 0.0), dt);
    if (dt != kBool) dst = to(randn({2, 6, 3}) * 10.0, dt), src = to(randn({2, 3, 3}) * 10.0, dt);
    const std::vector<int64_t> rows{5, 1, 5};  // row 5 twice: its last source row (k = 2) lands
    const std::vector<double> want = naive_index_copy(values(dst), values(src), rows, 2, 6, 3);
    dst.index_copy_(1, from_vector<int64_t>(rows, {3}), src);
    EXPECT_EQ(values(dst), want);
  }
}

TEST(CpuIndexCopy, BadInputsAreNamed) {
  Tensor dst = zeros({2, 4, 3}), src = ones({2, 1, 3});
  test::expect_error([&] { dst.index_copy_(1, from_vector<int64_t>({4}, {1}), src); },
                     {"index_copy_", "index 4", "out of range for dim 1 of size 4"});
  test::expect_error(
      [&] {
        dst.index_copy_(1, from_vector<int64_t>({0, 1}, {2}), src);
      },
      {"index_copy_", "source", "[2, 2, 3]"});
  test::expect_error([&] { dst.index_copy_(1, from_vector<int64_t>({0}, {1}), to(src, kF64)); },
                     {"index_copy_", "float64"});
  test::expect_error([&] { dst.index_copy_(1, from_vector<int32_t>({0}, {1}), src); },
                     {"index_copy_", "1-d int64"});
  Tensor strided = zeros({3, 4}).transpose(0, 1);  // (4, 3), not contiguous
  test::expect_error(
      [&] {
        strided.index_copy_(0, from_vector<int64_t>({0}, {1}), ones({1, 3}));
      },
      {"index_copy_", "contiguous"});
  Tensor w = zeros({4, 3});
  w.requires_grad_(true);
  test::expect_error(
      [&] {
        w.index_copy_(0, from_vector<int64_t>({0}, {1}), ones({1, 3}));
      },
      {"index_copy_", "NoGradGuard"});
  autograd::NoGradGuard no_grad;
  w.index_copy_(0, from_vector<int64_t>({2}, {1}), ones({1, 3}));
  EXPECT_EQ(values(w), (std::vector<double>{0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0}));
}

}  // namespace
}  // namespace loom
