// Capturable optimizers (Note [Capturable optimizer] in nn/optim/optimizer.h), on the CPU: with
// the learning rate and step count in device-side tensors they update bit for bit as the usual
// host-scalar step does, through learning-rate changes, a skip flag, a state_dict round trip and a
// GradScaler whose skip decision never reaches the host. The CUDA graph that needs all of this is
// tested in tests/train/test_cuda_step_runner_graph.cpp and test_cuda_step_runner_amp_graph.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <utility>

#include "autograd/ops/ops.h"
#include "nn/amp/grad_scaler.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"

using namespace loom;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * dtype_size(ca.dtype())) ==
         0;
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

struct Net {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
};

Net make_net(DType dtype, const MakeOpt& make_opt) {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(6, 5));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(5, 3));
  model->to(dtype);
  return {model, make_opt(model->parameters())};
}

// Steps of a fixed sequence of batches, with the learning rate changed at step 3.
void train(Net& net, DType dtype, int steps, int first = 0) {
  for (int i = first; i < first + steps; ++i) {
    Generator gen(100 + i);
    Tensor x = to(randn({4, 6}, {}, &gen), dtype);
    net.opt->zero_grad();
    sum(square((*net.model)(x))).backward();
    if (i == 3) net.opt->set_lr(net.opt->lr() * 0.5);
    net.opt->step();
  }
}

void expect_same_state(const Net& a, const Net& b) {
  auto pa = a.model->parameters(), pb = b.model->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bits(pa[i], pb[i])) << "parameter " << i;
  auto sa = a.opt->state_dict(), sb = b.opt->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(same_bits(sa[i].second, sb[i].second)) << sa[i].first;
  }
}

const MakeOpt kAdamW = [](std::vector<Tensor> p) {
  return std::make_unique<optim::AdamW>(std::move(p),
                                        optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.1});
};
const MakeOpt kAdamAmsgrad = [](std::vector<Tensor> p) {
  return std::make_unique<optim::Adam>(
      std::move(p), optim::AdamOptions{.lr = 0.03, .weight_decay = 0.01, .amsgrad = true});
};
const MakeOpt kSgdNesterov = [](std::vector<Tensor> p) {
  return std::make_unique<optim::SGD>(
      std::move(p),
      optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
};
const MakeOpt kSgdDampened = [](std::vector<Tensor> p) {
  return std::make_unique<optim::SGD>(
      std::move(p), optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3});
};

// Two identical nets, the second made capturable before its first step (state created up
// front), both trained for `steps` steps.
std::pair<Net, Net> usual_and_capturable(const MakeOpt& make, DType dtype, int steps) {
  Net usual = make_net(dtype, make), cap = make_net(dtype, make);
  cap.opt->make_capturable();
  EXPECT_TRUE(cap.opt->capturable());
  train(usual, dtype, steps);
  train(cap, dtype, steps);
  return {std::move(usual), std::move(cap)};
}

// Capturable from the start against the usual step.
void expect_bitwise_equal(const MakeOpt& make, DType dtype) {
  auto [usual, cap] = usual_and_capturable(make, dtype, 7);
  expect_same_state(usual, cap);
}

}  // namespace

TEST(CapturableOptimizer, AdamWMatchesTheHostScalarStepBitForBit) {
  expect_bitwise_equal(kAdamW, kF32);
  expect_bitwise_equal(kAdamW, kF64);
}

TEST(CapturableOptimizer, AdamAmsgradMatchesTheHostScalarStepBitForBit) {
  expect_bitwise_equal(kAdamAmsgrad, kF32);
}

TEST(CapturableOptimizer, SgdMomentumFirstStepRuleAndLaterStepsMatchBitForBit) {
  expect_bitwise_equal(kSgdNesterov, kF32);
  expect_bitwise_equal(kSgdDampened, kF64);  // dampening: the first step differs from zeros
}

TEST(CapturableOptimizer, MadeCapturableMidwayContinuesTheSameRun) {
  for (const MakeOpt* make : {&kAdamW, &kSgdDampened}) {
    Net usual = make_net(kF32, *make), cap = make_net(kF32, *make);
    train(usual, kF32, 7);
    train(cap, kF32, 2);
    cap.opt->make_capturable();  // SGD: its buffers exist, so the device count starts at 1
    train(cap, kF32, 5, 2);
    expect_same_state(usual, cap);
  }
}

TEST(CapturableOptimizer, StepUnlessSkipsEverythingOnTheFlag) {
  auto [usual, cap] = usual_and_capturable(kAdamW, kF32, 2);
  // A step with the flag set changes nothing (parameters, state, step count)...
  Tensor w0 = cap.model->parameters()[0].clone();
  Tensor flag = ones({1});
  cap.opt->zero_grad();
  sum((*cap.model)(randn({4, 6}))).backward();
  cap.opt->step_unless(flag);
  EXPECT_TRUE(same_bits(cap.model->parameters()[0], w0));
  EXPECT_EQ(cap.opt->state(0).step, 2);
  // ... and with the flag clear the run goes on as the uninterrupted one.
  flag.fill_(0.0);
  for (int i = 2; i < 5; ++i) {
    Generator gen(100 + i);
    Tensor x = randn({4, 6}, {}, &gen);
    usual.opt->zero_grad();
    sum(square((*usual.model)(x))).backward();
    usual.opt->step();
    cap.opt->zero_grad();
    sum(square((*cap.model)(x))).backward();
    cap.opt->step_unless(flag);
  }
  EXPECT_EQ(cap.opt->state(0).step, 5);
  expect_same_state(usual, cap);
}

TEST(CapturableOptimizer, StateDictRoundTripKeepsTheDeviceScalars) {
  auto [usual, saved] = usual_and_capturable(kAdamW, kF32, 3);
  Net loaded = make_net(kF32, kAdamW);
  for (size_t i = 0; i < loaded.model->parameters().size(); ++i) {
    NoGradGuard g;
    loaded.model->parameters()[i].copy_(saved.model->parameters()[i]);
  }
  loaded.opt->make_capturable();
  loaded.opt->load_state_dict(saved.opt->state_dict());  // step 3 and lr 0.02 onto the device
  EXPECT_EQ(loaded.opt->state(0).step, 3);
  train(usual, kF32, 4, 3);
  train(loaded, kF32, 4, 3);
  expect_same_state(usual, loaded);
}

TEST(CapturableOptimizer, ErrorsNameWhatPreventsCapture) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  optim::Adam composite(lin->parameters(), {.fused = false});
  try {
    composite.make_capturable();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused = false"), std::string::npos) << e.what();
  }
  optim::Adam plain(lin->parameters());
  try {
    plain.step_unless(zeros({1}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("make_capturable"), std::string::npos) << e.what();
  }
  // Parameters at different step counts cannot share one device step count.
  auto a = std::make_shared<nn::Linear>(3, 2);
  optim::Adam uneven(a->parameters());
  sum(a->forward(randn({2, 3}))).backward();
  a->bias.set_grad(Tensor());
  uneven.step();  // only the weight steps
  try {
    uneven.make_capturable();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different step counts"), std::string::npos) << e.what();
  }
}

TEST(CapturableOptimizer, GradScalerSkipsOnTheDeviceAndCountsSkippedSteps) {
  // Two runs, one capturable; the same forced overflow at step 1: the same decisions, weights,
  // scales and skipped-step counts, and the capturable one never reads the flag on the host.
  auto run = [](bool capturable) {
    manual_seed(2);
    nn::Linear lin(4, 3);
    optim::Adam opt(lin.parameters(), {.lr = 0.1});
    if (capturable) opt.make_capturable();
    amp::GradScaler scaler({.growth_interval = 2});
    std::vector<double> scales;
    for (int i = 0; i < 5; ++i) {
      Generator gen(7 + i);
      Tensor x = randn({5, 4}, {}, &gen);
      opt.zero_grad();
      scaler.scale(sum(lin.forward(x))).backward();
      if (i == 1) lin.weight.grad().data<float>()[2] = std::numeric_limits<float>::infinity();
      scaler.step(opt);
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
    return std::make_tuple(lin.weight.clone(), scales, scaler.skipped_steps(), opt.state(0).step);
  };
  auto [w_host, s_host, skipped_host, step_host] = run(false);
  auto [w_dev, s_dev, skipped_dev, step_dev] = run(true);
  EXPECT_EQ(skipped_host, 1);
  EXPECT_EQ(skipped_dev, 1);
  EXPECT_EQ(step_host, 4);
  EXPECT_EQ(step_dev, 4);
  EXPECT_EQ(s_dev, s_host);
  EXPECT_TRUE(same_bits(w_dev, w_host));
}
