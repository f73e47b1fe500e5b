// kernels/: the host-side geometry both backends share, checked against values worked out by
// hand: an elementwise loop's merged dims (kernels/loop_geometry.h) and a reduction's checks and
// layout (kernels/reduce_layout.h).
// Leaves out: the loops and kernels that walk these (the op table and the CUDA tests run them).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/loop_geometry.h"
#include "kernels/reduce_layout.h"

using namespace loom;

namespace {

template <int N>
std::vector<int64_t> sizes_of(const LoopGeometry<N>& L) {
  return {L.sizes.begin(), L.sizes.begin() + L.ndim};
}

template <int N>
std::vector<int64_t> strides_of(const LoopGeometry<N>& L, int k) {
  return {L.strides[size_t(k)].begin(), L.strides[size_t(k)].begin() + L.ndim};
}

}  // namespace

TEST(LoopGeometry, ContiguousOperandsMergeIntoOneDim) {
  // out, a: contiguous (2, 3, 4) -> one dim of 24, stride 1
  const Strides c{12, 4, 1};
  auto L = loop_geometry<2>({2, 3, 4}, {c, c});
  EXPECT_EQ(sizes_of(L), (std::vector<int64_t>{24}));
  EXPECT_EQ(strides_of(L, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(strides_of(L, 1), (std::vector<int64_t>{1}));
}

TEST(LoopGeometry, BroadcastAndTransposedOperandsKeepTheirDims) {
  // out (2, 3, 4) contiguous; b: a (4) bias broadcast over the first two dims -> (6, 4)
  auto L = loop_geometry<2>({2, 3, 4}, {Strides{12, 4, 1}, Strides{0, 0, 1}});
  EXPECT_EQ(sizes_of(L), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(strides_of(L, 0), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(strides_of(L, 1), (std::vector<int64_t>{0, 1}));
  // a: the transpose of a contiguous (3, 2) -> no merge
  auto T = loop_geometry<2>({2, 3}, {Strides{3, 1}, Strides{1, 2}});
  EXPECT_EQ(sizes_of(T), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(strides_of(T, 1), (std::vector<int64_t>{1, 2}));
}

TEST(LoopGeometry, SizeOneDimsDropAndNoMergeKeepsTheShape) {
  // (2, 1, 3) contiguous: the 1 drops and the rest merges; a single element has no dims left
  auto L = loop_geometry<1>({2, 1, 3}, {Strides{3, 3, 1}});
  EXPECT_EQ(sizes_of(L), (std::vector<int64_t>{6}));
  EXPECT_EQ(loop_geometry<1>({1, 1}, {Strides{1, 1}}).ndim, 0);
  // merge_dims = false (the CUDA naive kernel): every dim as given
  auto N = loop_geometry<1>({2, 1, 3}, {Strides{3, 3, 1}}, /*merge_dims=*/false);
  EXPECT_EQ(sizes_of(N), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_EQ(strides_of(N, 0), (std::vector<int64_t>{3, 3, 1}));
}

TEST(LoopGeometry, ChannelsLastOperandsWalkAsOneRun) {
  // out, a: channels-last (2, 3, 4, 5), strides (60, 1, 15, 3): walked N, H, W, C -> one run
  const Strides cl{60, 1, 15, 3};
  auto L = loop_geometry<2>({2, 3, 4, 5}, {cl, cl});
  EXPECT_EQ(sizes_of(L), (std::vector<int64_t>{120}));
  EXPECT_EQ(strides_of(L, 1), (std::vector<int64_t>{1}));
  // b: a per-channel (1, 3, 1, 1) broadcast -> (N H W 40, C 3), b moving along C only
  auto B = loop_geometry<2>({2, 3, 4, 5}, {cl, Strides{0, 1, 0, 0}});
  EXPECT_EQ(sizes_of(B), (std::vector<int64_t>{40, 3}));
  EXPECT_EQ(strides_of(B, 0), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(strides_of(B, 1), (std::vector<int64_t>{0, 1}));
  // a contiguous operand under a channels-last output: walked in the output's order
  auto M = loop_geometry<2>({2, 3, 4, 5}, {cl, Strides{60, 20, 5, 1}});
  EXPECT_EQ(sizes_of(M), (std::vector<int64_t>{2, 20, 3}));
  EXPECT_EQ(strides_of(M, 1), (std::vector<int64_t>{60, 1, 20}));
}

TEST(LoopGeometry, TooManyDimsNameTheCount) {
  Shape s(17, 1);
  Strides st(17, 1);
  try {
    loop_geometry<1>(s, {st});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensors of 17 dims are not supported (at most 16)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ReduceLayout, CheckedLayoutKeepsDimsFirst) {
  // x: (2, 3, 4), reducing dims {0, 2} -> out (3), rows of 2 * 4 after permuting to (1, 0, 2)
  ReduceLayout L = checked_reduce_layout(ReduceOp::Sum, {2, 3, 4}, DType::F32, {0, 2}, false);
  EXPECT_EQ(L.out_shape, (Shape{3}));
  EXPECT_EQ(L.perm, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(L.outer, 3);
  EXPECT_EQ(L.inner, 8);
  EXPECT_FALSE(L.reduced_dims_lead);
  ReduceLayout K = checked_reduce_layout(ReduceOp::Max, {2, 3}, DType::I64, {0}, true);
  EXPECT_EQ(K.out_shape, (Shape{1, 3}));
  EXPECT_TRUE(K.reduced_dims_lead);
}

TEST(ReduceLayout, ChecksNameTheOpAndValues) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([] {
    checked_reduce_layout(ReduceOp::Max, {2, 0}, DType::F32, {1}, false);
  });
  EXPECT_NE(m.find("max: cannot reduce over zero elements (shape [2, 0])"), std::string::npos) << m;
  m = message([] { checked_reduce_layout(ReduceOp::Mean, {2}, DType::I64, {}, false); });
  EXPECT_NE(m.find("mean: dtype int64 is not supported"), std::string::npos) << m;
  m = message([] { max_dim_layout({3, 0}, 1, false); });
  EXPECT_NE(m.find("max: cannot take the max over dim 1 of size 0 (shape [3, 0])"),
            std::string::npos)
      << m;
  // Sums and means over nothing are allowed: 0 and NaN.
  EXPECT_EQ(checked_reduce_layout(ReduceOp::Sum, {2, 0}, DType::F32, {1}, false).inner, 0);
  EXPECT_EQ(empty_reduction_value(ReduceOp::Sum), 0.0);
  EXPECT_TRUE(std::isnan(empty_reduction_value(ReduceOp::Mean)));
  EXPECT_EQ(max_dim_layout({3, 4}, 1, true).out_shape, (Shape{3, 1}));
}
