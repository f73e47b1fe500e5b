// Bad calls to conv2d, pooling and normalisation: each raises loom::Error whose message names the
// op and the offending shapes or values.
#include <gtest/gtest.h>

#include <functional>

#include "autograd/ops/ops.h"
#include "support/errors.h"

using loom::test::expect_error;
using namespace loom;

namespace {

Tensor f32(Shape s) { return randn(s); }

Conv2dParams conv(int64_t stride, int64_t pad, int64_t dil = 1, int64_t groups = 1) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  p.dilation = {dil, dil};
  p.groups = groups;
  return p;
}

Pool2dParams pool(int64_t k, int64_t stride, int64_t pad) {
  Pool2dParams p;
  p.kernel = {k, k};
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  return p;
}

}  // namespace

TEST(ConvBadCalls, InputNot4d) {
  expect_error(
      [] {
        conv2d(f32({3, 8, 8}), f32({4, 3, 3, 3}));
      },
      {"conv2d", "4-d input", "[3, 8, 8]"});
}
TEST(ConvBadCalls, WeightNot4d) {
  expect_error(
      [] {
        conv2d(f32({1, 3, 8, 8}), f32({4, 27}));
      },
      {"conv2d", "4-d weight", "[4, 27]"});
}
TEST(ConvBadCalls, ChannelMismatch) {
  expect_error(
      [] {
        conv2d(f32({2, 3, 8, 8}), f32({4, 2, 3, 3}));
      },
      {"conv2d", "input [2, 3, 8, 8] has 3 channels", "weight [4, 2, 3, 3] expects 2"});
}
TEST(ConvBadCalls, ChannelMismatchWithGroups) {
  expect_error(
      [] {
        conv2d(f32({2, 6, 8, 8}), f32({4, 2, 3, 3}), Tensor(), conv(1, 0, 1, 2));
      },
      {"conv2d", "[2, 6, 8, 8]", "6 channels", "[4, 2, 3, 3]", "expects 4", "groups=2"});
}
TEST(ConvBadCalls, GroupsDoNotDivideInputChannels) {
  expect_error(
      [] {
        conv2d(f32({1, 5, 8, 8}), f32({4, 2, 3, 3}), Tensor(), conv(1, 0, 1, 2));
      },
      {"conv2d", "groups=2", "5", "[1, 5, 8, 8]"});
}
TEST(ConvBadCalls, GroupsDoNotDivideOutputChannels) {
  expect_error(
      [] {
        conv2d(f32({1, 4, 8, 8}), f32({3, 2, 3, 3}), Tensor(), conv(1, 0, 1, 2));
      },
      {"conv2d", "groups=2", "3 output channels", "[3, 2, 3, 3]"});
}
TEST(ConvBadCalls, ZeroGroups) {
  expect_error(
      [] {
        conv2d(f32({1, 4, 8, 8}), f32({3, 4, 3, 3}), Tensor(), conv(1, 0, 1, 0));
      },
      {"conv2d", "groups", "0"});
}
TEST(ConvBadCalls, KernelLargerThanPaddedInput) {
  expect_error(
      [] {
        conv2d(f32({1, 1, 4, 4}), f32({2, 1, 5, 5}));
      },
      {"conv2d", "kernel 5x5", "[1, 1, 4, 4]", "padding [0, 0]", "output size 0"});
}
TEST(ConvBadCalls, DilatedKernelLargerThanInput) {
  expect_error(
      [] {
        conv2d(f32({1, 1, 6, 6}), f32({2, 1, 3, 3}), Tensor(), conv(1, 0, 3));
      },
      {"conv2d", "kernel 3x3", "dilation [3, 3]", "[1, 1, 6, 6]"});
}
TEST(ConvBadCalls, ZeroStride) {
  expect_error(
      [] {
        conv2d(f32({1, 1, 6, 6}), f32({2, 1, 3, 3}), Tensor(), conv(0, 0));
      },
      {"conv2d", "stride", "[0, 0]"});
}
TEST(ConvBadCalls, NegativePadding) {
  expect_error(
      [] {
        conv2d(f32({1, 1, 6, 6}), f32({2, 1, 3, 3}), Tensor(), conv(1, -1));
      },
      {"conv2d", "padding", "[-1, -1]"});
}
TEST(ConvBadCalls, BiasWrongSize) {
  expect_error(
      [] {
        conv2d(f32({1, 3, 6, 6}), f32({4, 3, 3, 3}), f32({3}));
      },
      {"conv2d", "bias [3]", "[4]", "[4, 3, 3, 3]"});
}
TEST(ConvBadCalls, DtypeMix) {
  expect_error(
      [] {
        conv2d(f32({1, 3, 6, 6}), randn({4, 3, 3, 3}, {.dtype = kF64}));
      },
      {"conv2d", "float32", "float64"});
}
TEST(ConvBadCalls, IntegerInput) {
  expect_error(
      [] {
        conv2d(zeros({1, 1, 4, 4}, {.dtype = kI64}), zeros({1, 1, 3, 3}, {.dtype = kI64}));
      },
      {"conv2d", "int64"});
}

TEST(PoolBadCalls, MaxPoolInput2d) {
  expect_error([] { max_pool2d(f32({8, 8}), pool(2, 2, 0)); }, {"max_pool2d", "[8, 8]"});
}
TEST(PoolBadCalls, MaxPoolPaddingOverHalfKernel) {
  expect_error(
      [] {
        max_pool2d(f32({1, 1, 8, 8}), pool(2, 2, 2));
      },
      {"max_pool2d", "padding [2, 2]", "half the kernel size [2, 2]"});
}
TEST(PoolBadCalls, MaxPoolKernelLargerThanInput) {
  expect_error(
      [] {
        max_pool2d(f32({1, 1, 3, 3}), pool(4, 1, 0));
      },
      {"max_pool2d", "kernel [4, 4]", "[1, 1, 3, 3]"});
}
TEST(PoolBadCalls, AvgPoolZeroStride) {
  expect_error(
      [] {
        avg_pool2d(f32({1, 1, 4, 4}), pool(2, 0, 0));
      },
      {"avg_pool2d", "stride", "[0, 0]"});
}
TEST(PoolBadCalls, AdaptiveZeroOutput) {
  expect_error(
      [] {
        adaptive_avg_pool2d(f32({1, 1, 4, 4}), {0, 2});
      },
      {"adaptive_avg_pool2d", "[0, 2]"});
}

TEST(NormBadCalls, BatchNormWeightWrongSize) {
  expect_error(
      [] {
        batch_norm(f32({4, 3, 2, 2}), f32({5}), Tensor(), Tensor(), Tensor(), true);
      },
      {"batch_norm", "weight [5]", "3 channels", "[4, 3, 2, 2]"});
}
TEST(NormBadCalls, BatchNormOneValuePerChannel) {
  expect_error(
      [] {
        batch_norm(f32({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {"batch_norm", "more than 1 value per channel", "[1, 3]"});
}
TEST(NormBadCalls, BatchNormOnlyOneRunningStat) {
  expect_error(
      [] {
        batch_norm(f32({4, 3}), Tensor(), Tensor(), zeros({3}), Tensor(), true);
      },
      {"batch_norm", "running_mean", "running_var"});
}
TEST(NormBadCalls, BatchNorm1d) {
  expect_error([] { batch_norm(f32({4}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
               {"batch_norm", "at least 2 dims", "[4]"});
}
TEST(NormBadCalls, LayerNormShapeMismatch) {
  expect_error([] { layer_norm(f32({2, 3, 4}), {5}); }, {"layer_norm", "[2, 3, 4]", "[5]"});
}
TEST(NormBadCalls, LayerNormWeightShape) {
  expect_error(
      [] {
        layer_norm(f32({2, 3, 4}), {4}, f32({3}));
      },
      {"layer_norm", "weight [3]", "[4]"});
}
