// amp::GradScaler: the fused unscale (values and the inf flag), a forced overflow that skips the
// step bit for bit and halves the scale, growth after the interval (counted again from zero after
// a skipped step), and its state through a checkpoint (and an old checkpoint without it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "autograd/ops/ops.h"
#include "autograd/ops/optim.h"
#include "nn/amp/grad_scaler.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "support/temp_files.h"

using namespace loom;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  return va.size() == vb.size() &&
         std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(AmpUnscale, MultipliesByTheInverseScaleAndFlagsInfAndNan) {
  Tensor a = from_vector<float>({2.f, -4.f, 8.f}, {3});
  Tensor b = from_vector<float>({1.f, 3.f}, {2});
  Tensor found = zeros({1}), scale = full({1}, 4.0);
  amp_unscale_({a, b}, found, scale);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.5f, -1.f, 2.f}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0.25f, 0.75f}));
  EXPECT_EQ(found.item(), 0.0);
  for (float bad : {kInf, -kInf, std::nanf("")}) {
    Tensor c = from_vector<float>({1.f, bad, 1.f}, {3});
    Tensor d = ones({5});
    amp_unscale_({d, c}, found, scale);
    EXPECT_EQ(found.item(), 1.0) << bad;
    EXPECT_EQ(d.to_vector<float>(), std::vector<float>(5, 0.25f));
    found.fill_(0.0);
  }
  // The flag is only ever set, never cleared, by unscale.
  found.fill_(1.0);
  amp_unscale_({ones({2})}, found, scale);
  EXPECT_EQ(found.item(), 1.0);
  EXPECT_THROW(amp_unscale_({ones({2}, {.dtype = kF16})}, found, scale), Error);
  EXPECT_THROW(amp_unscale_({ones({2})}, zeros({2}), scale), Error);
}

TEST(AmpUpdateScale, BacksOffOnInfAndGrowsAfterTheInterval) {
  Tensor scale = full({1}, 8.0), tracker = zeros({1}, {.dtype = kI32}), found = zeros({1});
  amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3);
  amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3);
  EXPECT_EQ(scale.item(), 8.0);
  EXPECT_EQ(tracker.item(), 2.0);
  amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3);
  EXPECT_EQ(scale.item(), 16.0);
  EXPECT_EQ(tracker.item(), 0.0);
  found.fill_(1.0);
  amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3);
  EXPECT_EQ(scale.item(), 8.0);
  EXPECT_EQ(tracker.item(), 0.0);
}

TEST(GradScaler, ScalesTheLossAndUnscalesGradientsExactly) {
  manual_seed(0);
  nn::Linear lin(4, 3);
  optim::SGD opt(lin.parameters(), {.lr = 0.1});
  Tensor x = randn({5, 4});
  // Reference gradients from the unscaled loss.
  sum(lin.forward(x)).backward();
  Tensor g_ref = lin.weight.grad().clone();
  opt.zero_grad();
  amp::GradScaler scaler;
  Tensor loss = sum(lin.forward(x));
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item(), loss.item() * 65536.0);
  scaled.backward();
  scaler.unscale_(opt);
  EXPECT_TRUE(same_bits(lin.weight.grad(), g_ref)) << "a power-of-two scale unscales exactly";
  EXPECT_THROW(scaler.unscale_(opt), Error) << "twice in one step";
  Tensor w_before = lin.weight.clone();
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_FALSE(same_bits(lin.weight, w_before));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, AForcedOverflowSkipsTheStepAndHalvesTheScale) {
  manual_seed(1);
  nn::Linear lin(4, 3);
  optim::Adam opt(lin.parameters(), {.lr = 0.1});
  amp::GradScaler scaler;
  Tensor x = randn({5, 4});
  Tensor w0 = lin.weight.clone(), b0 = lin.bias.clone();
  scaler.scale(sum(lin.forward(x))).backward();
  lin.weight.grad().data<float>()[3] = kInf;  // one overflowed element
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_TRUE(same_bits(lin.weight, w0));
  EXPECT_TRUE(same_bits(lin.bias, b0));
  EXPECT_EQ(opt.state(0).step, 0) << "the optimizer did not count the skipped step";
  EXPECT_FALSE(opt.state(0).initialized());
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // The next step (finite) goes through at the halved scale.
  opt.zero_grad();
  scaler.scale(sum(lin.forward(x))).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(opt.state(0).step, 1);
  EXPECT_FALSE(same_bits(lin.weight, w0));
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(GradScaler, GrowsAfterTheIntervalOfGoodSteps) {
  manual_seed(2);
  nn::Linear lin(2, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 4.0, .growth_interval = 3});
  Tensor x = randn({3, 2});
  auto one_step = [&] {
    opt.zero_grad();
    scaler.scale(sum(lin.forward(x))).backward();
    scaler.step(opt);
    scaler.update();
  };
  one_step();
  one_step();
  EXPECT_EQ(scaler.get_scale(), 4.0);
  one_step();
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) one_step();
  EXPECT_EQ(scaler.get_scale(), 16.0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

// A skipped step resets the count of good steps: with interval 3, two good steps, a skip (the
// scale halves) and two more good steps leave the scale halved; only the third good step after
// the skip doubles it. Counting on from before the skip would grow it one step early.
TEST(GradScaler, ASkippedStepRestartsTheGrowthInterval) {
  manual_seed(4);
  nn::Linear lin(2, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  Tensor x = randn({3, 2});
  auto one_step = [&](bool overflow) {
    opt.zero_grad();
    scaler.scale(sum(lin.forward(x))).backward();
    if (overflow) lin.weight.grad().data<float>()[1] = kInf;
    bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  EXPECT_TRUE(one_step(false));
  EXPECT_TRUE(one_step(false));
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_FALSE(one_step(true));
  EXPECT_EQ(scaler.growth_tracker(), 0) << "the skipped step restarts the count";
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_TRUE(one_step(false));
  EXPECT_TRUE(one_step(false));
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_EQ(scaler.get_scale(), 4.0) << "two good steps since the skip: no growth yet";
  EXPECT_TRUE(one_step(false));
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.get_scale(), 8.0) << "the third good step since the skip grows the scale";
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

TEST(GradScaler, StateRoundTripsThroughACheckpoint) {
  loom::test::TempDir dir;
  manual_seed(3);
  nn::Linear lin(2, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.01});
  amp::GradScaler scaler(
      {.init_scale = 1024.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 5});
  Tensor x = randn({3, 2});
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    scaler.scale(sum(lin.forward(x))).backward();
    if (i == 1) {
      NoGradGuard g;
      lin.bias.grad().fill_(std::nan(""));
    }
    scaler.step(opt);
    scaler.update();
  }
  ASSERT_EQ(scaler.get_scale(), 256.0);
  ASSERT_EQ(scaler.growth_tracker(), 1);
  TrainingState st;
  st.model = lin.state_dict();
  st.scaler = scaler.state_dict();
  std::string path = save_checkpoint(dir.path, 7, st);
  TrainingState r = load_checkpoint(path);
  amp::GradScaler restored;
  restored.load_state_dict(r.scaler);
  EXPECT_EQ(restored.get_scale(), 256.0);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.skipped_steps(), 1);
  EXPECT_EQ(restored.options().growth_factor, 4.0);
  EXPECT_EQ(restored.options().backoff_factor, 0.25);
  EXPECT_EQ(restored.options().growth_interval, 5);
  // The restored scaler continues the schedule: 4 more good steps reach the interval.
  for (int i = 0; i < 4; ++i) {
    opt.zero_grad();
    restored.scale(sum(lin.forward(x))).backward();
    restored.step(opt);
    restored.update();
  }
  EXPECT_EQ(restored.get_scale(), 1024.0);
  // A checkpoint written without a scaler (before mixed precision) loads with an empty section,
  // and a scaler refuses an incomplete state by name.
  TrainingState old;
  old.model = lin.state_dict();
  TrainingState r_old = load_checkpoint(save_checkpoint(dir.path, 8, old));
  EXPECT_TRUE(r_old.scaler.empty());
  amp::GradScaler fresh;
  try {
    fresh.load_state_dict({{"scale", nn::scalar_entry(2.0)}});
    ADD_FAILURE() << "an incomplete state must not load";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("growth_tracker"), std::string::npos) << e.what();
  }
}
