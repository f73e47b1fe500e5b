// The optimizer inside backward (nn/optim/in_backward.h): for SGD with momentum, Adam and AdamW,
// training with the update made in each parameter's post-accumulate hook gives bit for bit the
// parameters and optimizer state of the usual step(); gradients are freed as they are consumed; a
// parameter without a gradient is left alone; the hooks go quiet when it is destroyed; and the
// combinations it cannot serve (two at once, a GradScaler, a CUDA graph step) fail with errors
// that say why. Peak device memory is checked on CUDA in
// tests/kernels/cuda/optim/test_cuda_optim.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "autograd/ops/ops.h"
#include "nn/amp/grad_scaler.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "nn/optim/in_backward.h"
#include "nn/optim/sgd.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

// Same shape, dtype and values, bit for bit (values compared as float64, an exact widening).
bool all_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.detach().to(kCPU).to(kF64).contiguous(),
         y = b.detach().to(kCPU).to(kF64).contiguous();
  return std::memcmp(x.data<double>(), y.data<double>(), size_t(x.numel()) * sizeof(double)) == 0;
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// A float64 MLP with a fixed initialisation, so two copies start identical.
std::shared_ptr<nn::Sequential> model_f64() {
  manual_seed(11);
  auto m = nn::make_mlp(24, 5);
  m->to(kF64);
  return m;
}

// Runs `steps` training steps of the mlp on fixed random batches, with the update in step() or
// inside backward, and returns the parameters and the optimizer state flattened in order.
std::vector<Tensor> train(const MakeOpt& make, bool in_backward, int steps) {
  auto model = model_f64();
  auto opt = make(model->parameters());
  std::unique_ptr<optim::OptimizerInBackward> ib;
  if (in_backward) ib = std::make_unique<optim::OptimizerInBackward>(*opt);
  Generator gen(3);
  for (int s = 0; s < steps; ++s) {
    Tensor x = randn({16, 1, 28, 28}, {.dtype = kF64}, &gen);
    Tensor y = randint(0, 5, {16}, {.dtype = kI64}, &gen);
    opt->zero_grad();
    cross_entropy((*model)(x), y).backward();
    if (in_backward) {
      for (const Tensor& p : model->parameters())
        EXPECT_FALSE(p.grad().defined()) << p.name() << ": the hook frees each gradient";
    } else {
      opt->step();
    }
  }
  if (ib) {
    EXPECT_EQ(ib->updates(), int64_t(steps * model->parameters().size()));
  }
  std::vector<Tensor> out = model->parameters();
  for (size_t i = 0; i < opt->all_params().size(); ++i)
    for (const Tensor& b : opt->state(i).buffers) out.push_back(b);
  return out;
}

void expect_identical(const MakeOpt& make, const std::string& what) {
  auto want = train(make, false, 6), got = train(make, true, 6);
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_equal(want[i], got[i])) << what << ": tensor " << i << " differs";
}

}  // namespace

TEST(OptimizerInBackward, SameParametersAndStateAsStep) {
  expect_identical(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(
            std::move(p), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
      },
      "SGD with momentum");
  expect_identical(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(std::move(p),
                                             optim::AdamOptions{.lr = 1e-2, .amsgrad = true});
      },
      "Adam (amsgrad)");
  expect_identical(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-2});
      },
      "AdamW");
  expect_identical(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(std::move(p),
                                             optim::AdamOptions{.lr = 1e-2, .fused = false});
      },
      "Adam, composite update");
}

TEST(OptimizerInBackward, AParameterWithoutAGradientIsLeftAlone) {
  manual_seed(2);
  nn::Linear used(4, 3), unused(4, 3);
  std::vector<Tensor> params = used.parameters();
  for (const Tensor& p : unused.parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 0.1});
  optim::OptimizerInBackward ib(opt);
  Tensor w_used = used.weight.detach().clone(), w_unused = unused.weight.detach().clone();
  used(randn({2, 4})).sum().backward();
  EXPECT_EQ(ib.updates(), 2);  // weight and bias of `used`
  EXPECT_FALSE(all_equal(used.weight, w_used));
  EXPECT_TRUE(all_equal(unused.weight, w_unused));
  EXPECT_EQ(opt.state(2).step, 0);  // unused.weight: no state, no step counted
}

TEST(OptimizerInBackward, DestroyedItLeavesGradientsToStep) {
  manual_seed(4);
  nn::Linear lin(3, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.1});
  {
    optim::OptimizerInBackward ib(opt);
    lin(randn({2, 3})).sum().backward();
    EXPECT_FALSE(lin.weight.grad().defined());
  }
  Tensor before = lin.weight.detach().clone();
  lin(randn({2, 3})).sum().backward();
  ASSERT_TRUE(lin.weight.grad().defined()) << "the old hooks must do nothing now";
  EXPECT_TRUE(all_equal(lin.weight, before));
  opt.step();
  EXPECT_FALSE(all_equal(lin.weight, before));
  optim::OptimizerInBackward again(opt);  // a new one may attach once the old one is gone
}

TEST(OptimizerInBackward, CombinationsItCannotServeAreErrors) {
  manual_seed(6);
  auto model = nn::make_mlp(8, 3);
  optim::Adam opt(model->parameters());
  {
    optim::OptimizerInBackward ib(opt);
    try {
      optim::OptimizerInBackward twice(opt);
      FAIL() << "a second OptimizerInBackward on one optimizer must fail";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("already runs inside backward"), std::string::npos)
          << e.what();
    }
  }
  amp::GradScaler scaler({.enabled = true});
  {
    train::StepRunner runner(*model, opt, 0.0, false);
    runner.set_amp(kF16, &scaler);
    try {
      runner.set_optimizer_in_backward(true);
      FAIL() << "a GradScaler and the optimizer inside backward must not combine";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("GradScaler"), std::string::npos) << e.what();
    }
  }
  {
    train::StepRunner runner(*model, opt, 0.0, false);
    runner.set_optimizer_in_backward(true);
    EXPECT_THROW(runner.set_amp(kF16, &scaler), Error);
  }
  {
    train::StepRunner runner(*model, opt, 0.0, /*graph=*/true);
    try {
      runner.set_optimizer_in_backward(true);
      FAIL() << "a CUDA graph step and the optimizer inside backward must not combine";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA graph"), std::string::npos) << e.what();
    }
  }
  try {
    Tensor stranger = zeros({2}).requires_grad_(true);
    stranger.set_grad(ones({2}));
    opt.step_one(stranger);
    FAIL() << "step_one on a tensor the optimizer does not hold must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not one of its parameters"), std::string::npos)
        << e.what();
  }
}

// Through the step runner (what bench_train --optimizer-in-backward uses): the same losses as the
// usual step, step after step.
TEST(OptimizerInBackward, StepRunnerTrainsTheSameWay) {
  std::vector<double> losses[2];
  for (int mode = 0; mode < 2; ++mode) {
    auto model = model_f64();
    optim::Adam opt(model->parameters(), {.lr = 1e-2});
    train::StepRunner runner(*model, opt, 0.0, false);
    runner.set_optimizer_in_backward(mode == 1);
    Generator gen(9);
    Tensor x = randn({32, 1, 28, 28}, {.dtype = kF64}, &gen);
    Tensor y = randint(0, 5, {32}, {.dtype = kI64}, &gen);
    for (int s = 0; s < 10; ++s) losses[mode].push_back(runner.step(x, y).item());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_LT(losses[1].back(), 0.5 * losses[1].front()) << "it learns";
}
