// Gradient accumulation in train::StepRunner (set_grad_accum, Note [Gradient accumulation] in
// train/micro_batches.h) on the CPU: k micro-batches end with the weights and the loss of one
// hand-written full-batch step (SGD, AdamW, clipping; float64 and float32), fp16 loss scaling
// updates once per step, and the misuses are errors naming their values. DDP over Gloo:
// test_step_runner_accum_ddp.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "distributed/ddp/ddp_case.h"
#include "nn/amp/grad_scaler.h"
#include "nn/clip.h"
#include "nn/optim/adam.h"
#include "support/errors.h"
#include "train/step_runner.h"

using namespace loom;

using loom::test::error_of;

namespace {

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(nn::Module&)>;

std::unique_ptr<optim::Optimizer> make_sgd(nn::Module& m) { return test::ddp_case_optimizer(m); }
std::unique_ptr<optim::Optimizer> make_adamw(nn::Module& m) {
  return std::make_unique<optim::AdamW>(m.parameters(),
                                        optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
}

constexpr int kSteps = 3;
constexpr int64_t kRows = 24;  // the batch; 4 micro-batches of 6

struct Trained {
  nn::NamedTensors weights;
  std::vector<double> losses;  // each step's loss (before its update)
  double last_norm = 0;        // the last step's gradient norm before clipping
};

// The oracle: kSteps steps on the whole batch written out by hand (zero_grad, mean
// cross-entropy, backward, clip, step), no StepRunner.
Trained by_hand(DType dt, const MakeOpt& make_opt, double clip) {
  auto model = test::ddp_case_model(dt, 7);
  auto opt = make_opt(*model);
  Trained r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, kRows, dt);
    opt->zero_grad();
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    if (clip > 0) r.last_norm = nn::clip_grad_norm_(opt->all_params(), clip).item();
    opt->step();
    r.losses.push_back(loss.item());
  }
  r.weights = model->named_parameters();
  return r;
}

Trained with_runner(DType dt, const MakeOpt& make_opt, double clip, int64_t k) {
  auto model = test::ddp_case_model(dt, 7);
  auto opt = make_opt(*model);
  train::StepRunner runner(*model, *opt, 0.0, false);
  runner.set_grad_accum(k);
  runner.set_grad_clip(clip);
  Trained r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, kRows, dt);
    r.losses.push_back(runner.step(x, y).item());
  }
  if (clip > 0) r.last_norm = runner.grad_norm().item();
  r.weights = model->named_parameters();
  return r;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard g;
  return max(abs(a.detach().to(kF64) - b.detach().to(kF64))).item();
}

// Tolerances: float64 sums the gradient in a different order (k partial sums) and rounds the
// loss / k products: a few ulps per step, far below 1e-12 for weights of size ~1. float32: the
// same roundings at 6e-8 each, grown over 3 steps and AdamW's normalisation: 1e-5.
void expect_same_training(DType dt, const MakeOpt& make_opt, double clip, int64_t k) {
  const double tol = dt == kF64 ? 1e-12 : 1e-5;
  Trained ref = by_hand(dt, make_opt, clip);
  Trained acc = with_runner(dt, make_opt, clip, k);
  Trained init{test::ddp_case_model(dt, 7)->named_parameters(), {}, 0};
  ASSERT_EQ(ref.weights.size(), acc.weights.size());
  double moved = 0;
  for (size_t i = 0; i < ref.weights.size(); ++i) {
    EXPECT_LE(max_abs_diff(ref.weights[i].second, acc.weights[i].second), tol)
        << ref.weights[i].first << " after " << kSteps << " steps with k = " << k;
    moved = std::max(moved, max_abs_diff(ref.weights[i].second, init.weights[i].second));
  }
  EXPECT_GT(moved, 100 * tol) << "the weights must move for the comparison to mean anything";
  for (int s = 0; s < kSteps; ++s)
    EXPECT_NEAR(acc.losses[size_t(s)], ref.losses[size_t(s)], tol) << "the loss of step " << s;
  if (clip > 0) {
    EXPECT_GT(ref.last_norm, 2 * clip) << "clipping must act for the test to mean anything";
    EXPECT_NEAR(acc.last_norm, ref.last_norm, tol * ref.last_norm);
  }
}

}  // namespace

TEST(GradAccum, SgdMicroBatchesEqualTheFullBatchStep) {
  for (DType dt : {kF64, kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_same_training(dt, make_sgd, 0.0, 4);
    expect_same_training(dt, make_sgd, 0.0, 3);  // 1/3 is not exact in binary
  }
}

TEST(GradAccum, AdamWMicroBatchesEqualTheFullBatchStep) {
  for (DType dt : {kF64, kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_same_training(dt, make_adamw, 0.0, 4);
  }
}

TEST(GradAccum, ClippingSeesTheAccumulatedGradient) {
  for (DType dt : {kF64, kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_same_training(dt, make_sgd, 0.05, 4);
    expect_same_training(dt, make_adamw, 0.05, 4);
  }
}

// fp16 autocast with a GradScaler whose scale doubles at every update: after 3 steps of 4
// micro-batches it has doubled 3 times (one update per step, not per micro-batch), no step was
// skipped, and the weights are those of the float32 full-batch run within fp16's rounding
// (unit roundoff 4.9e-4 on activations of size ~1, times lr 0.05, over 3 steps: 1e-3).
TEST(GradAccum, Fp16LossScalingUpdatesOncePerStep) {
  auto model = test::ddp_case_model(kF32, 7);
  auto opt = make_sgd(*model);
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 1});
  train::StepRunner runner(*model, *opt, 0.0, false);
  runner.set_amp(kF16, &scaler);
  runner.set_grad_accum(4);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, kRows, kF32);
    runner.step(x, y);
  }
  EXPECT_EQ(scaler.get_scale(), 1024.0 * 8);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  Trained ref = by_hand(kF32, make_sgd, 0.0);
  nn::NamedTensors w = model->named_parameters();
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_LE(max_abs_diff(w[i].second, ref.weights[i].second), 1e-3) << w[i].first;
}

TEST(GradAccum, BadValuesAreErrorsNamingThem) {
  auto model = test::ddp_case_model(kF32, 7);
  auto opt = make_sgd(*model);
  train::StepRunner runner(*model, *opt, 0.0, false);
  std::string e = error_of([&] { runner.set_grad_accum(0); });
  EXPECT_NE(e.find("--grad-accum 0"), std::string::npos) << e;
  runner.set_grad_accum(4);
  const auto batch = test::ddp_case_batch(0, 10, kF32);  // 10 rows
  e = error_of([&] { runner.step(batch.first, batch.second); });
  EXPECT_NE(e.find("--grad-accum 4"), std::string::npos) << e;
  EXPECT_NE(e.find("has 10 examples"), std::string::npos) << e;
  e = error_of([&] { runner.set_optimizer_in_backward(true); });
  EXPECT_NE(e.find("--grad-accum 4"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer inside backward"), std::string::npos) << e;
  runner.set_grad_accum(1);
  runner.set_optimizer_in_backward(true);
  e = error_of([&] { runner.set_grad_accum(2); });
  EXPECT_NE(e.find("--grad-accum 2"), std::string::npos) << e;
}
