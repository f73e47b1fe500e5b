// BatchNorm2d's synchronised path (nn/batch_norm_sync.cpp, Note [SyncBatchNorm]) in one process,
// in float64: with a sum over a world of one it gives batch_norm's outputs, input and parameter
// gradients and running stats (also with the fused ReLU and max-pool); with a stand-in for a
// second process holding the other half of a batch, its outputs and running stats are the whole
// batch's. Leaves out: real processes and the backward across them
// (tests/examples/test_train_cnn_models.cpp trains ResNet-18 on 2 Gloo processes against one).
#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "nn/layers.h"

using namespace loom;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(a - b)).item(); }

// A world of one: the sum is t itself (a differentiable copy).
struct OneProcess : nn::CrossProcessSum {
  Tensor operator()(const Tensor& t) const override { return t * 1.0; }
};

// This process holds x_a; a second one, simulated, holds x_b. Forward only: the first call (the
// per-channel sums and the count) adds x_b's, the second (centred squares) x_b's around the mean.
struct OtherHalf : nn::CrossProcessSum {
  Tensor xb;
  mutable Tensor mean;
  mutable int calls = 0;
  Tensor operator()(const Tensor& t) const override {
    const int64_t C = xb.size(1);
    if (calls++ % 2 == 0) {
      Tensor other = cat({sum(xb, {0, 2, 3}), full({1}, double(xb.numel() / C), {.dtype = kF64})});
      Tensor out = t + other;
      mean = (slice(out, 0, 0, C) / slice(out, 0, C, C + 1)).detach();
      return out;
    }
    return t + sum(square(xb - view(mean, {1, C, 1, 1})), {0, 2, 3});
  }
};

std::shared_ptr<nn::BatchNorm2d> make_bn(int64_t c) {
  auto bn = std::make_shared<nn::BatchNorm2d>(c);
  bn->to(kF64);
  manual_seed(3);
  bn->weight.detach().copy_(randn({c}, {.dtype = kF64}) + 1.0);
  bn->bias.detach().copy_(randn({c}, {.dtype = kF64}));
  return bn;
}

}  // namespace

TEST(BatchNormSync, WorldOfOneEqualsBatchNormWithItsGradients) {
  for (int variant = 0; variant < 3; ++variant) {  // plain, + ReLU, + ReLU and max-pool 2
    SCOPED_TRACE(variant);
    auto plain = make_bn(3), synced = make_bn(3);
    synced->sync = std::make_shared<OneProcess>();
    manual_seed(7);
    Tensor x = randn({4, 3, 6, 6}, {.dtype = kF64}), w = randn({4, 3, 3, 3}, {.dtype = kF64});
    Tensor xa = x.detach().requires_grad_(true), xb = x.detach().clone().requires_grad_(true);
    Tensor ya = plain->forward(xa, variant > 0, variant == 2);
    Tensor yb = synced->forward(xb, variant > 0, variant == 2);
    ASSERT_EQ(ya.shape(), yb.shape());
    EXPECT_LE(max_abs_diff(ya, yb), 1e-12);
    Tensor g = randn(ya.shape(), {.dtype = kF64});
    sum(ya * g).backward();
    sum(yb * g).backward();
    EXPECT_LE(max_abs_diff(xa.grad(), xb.grad()), 1e-12);
    EXPECT_LE(max_abs_diff(plain->weight.grad(), synced->weight.grad()), 1e-12);
    EXPECT_LE(max_abs_diff(plain->bias.grad(), synced->bias.grad()), 1e-12);
    EXPECT_LE(max_abs_diff(plain->running_mean, synced->running_mean), 1e-14);
    EXPECT_LE(max_abs_diff(plain->running_var, synced->running_var), 1e-14);
    EXPECT_EQ(synced->num_batches_tracked.item(), 1.0);
    EXPECT_GT(max_abs_diff(synced->running_var, ones({3}, {.dtype = kF64})), 1e-3);
  }
}

TEST(BatchNormSync, HalfABatchWithTheOtherHalfElsewhereNormalisesAsTheWholeBatch) {
  manual_seed(11);
  Tensor x = randn({6, 2, 5, 5}, {.dtype = kF64}) * 3.0 + 1.5;  // (6, C 2, 5, 5)
  Tensor xa = slice(x, 0, 0, 2), xb = slice(x, 0, 2, 6);        // 2 images here, 4 there
  auto whole = make_bn(2), half = make_bn(2);
  auto other = std::make_shared<OtherHalf>();
  other->xb = xb.contiguous();
  half->sync = other;
  NoGradGuard g;
  Tensor want = slice(whole->forward(x), 0, 0, 2);
  Tensor got = half->forward(xa.contiguous());
  EXPECT_LE(max_abs_diff(want, got), 1e-12);
  EXPECT_LE(max_abs_diff(whole->running_mean, half->running_mean), 1e-14);
  EXPECT_LE(max_abs_diff(whole->running_var, half->running_var), 1e-14);
  // The half alone normalises otherwise: the test could tell.
  auto alone = make_bn(2);
  EXPECT_GT(max_abs_diff(want, alone->forward(xa.contiguous())), 1e-2);
  // Eval uses the running stats, not the processes.
  half->eval();
  whole->eval();
  EXPECT_LE(max_abs_diff(whole->forward(x), half->forward(x)), 1e-12);
  EXPECT_EQ(other->calls, 2);
}
