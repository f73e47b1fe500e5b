// End to end against PyTorch: for a small MLP and a small CNN, the weights and a batch come from
// tests/nn/golden/*.txt (written by make_golden.py with PyTorch, float64, CPU), and loom's loss,
// gradients, BatchNorm running stats, parameters after one optimizer step and the loss after it
// must match PyTorch's. The issue asks for 1e-5; in float64 loom agrees to 1e-14 (relative, on
// 2026-11-30 with torch 2.15), so the test holds it to 1e-10.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "support/golden_file.h"

using namespace loom;
using namespace loom::nn;

namespace {

constexpr double kTol = 1e-10;

using Golden = test::GoldenFile;  // float64 CPU tensors by name (tests/support/golden_file.h)

Golden read_golden(const std::string& file) {
  return test::read_golden_file(test::golden_dir() + file);
}

// The entries "<prefix><name>" as a StateDict named <name>.
StateDict with_prefix(const Golden& g, const std::string& prefix) {
  StateDict sd;
  for (const auto& [n, v] : g.values)
    if (n.rfind(prefix, 0) == 0) sd.emplace_back(n.substr(prefix.size()), v);
  return sd;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to_vector<double>(), b = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
  EXPECT_LT(worst, kTol) << what;
}

// Loads the golden weights and buffers, runs one step with `opt`, and checks everything.
void check_one_step(Module& model, const Golden& g,
                    const std::function<Tensor(const Tensor&, const Tensor&)>& loss_fn,
                    optim::Optimizer& opt) {
  StateDict sd = with_prefix(g, "param.");
  for (auto& e : with_prefix(g, "buffer_before.")) sd.push_back(e);
  model.load_state_dict(sd);
  Tensor x = g.at("input"), target = g.at("target").to(kI64);

  opt.zero_grad();
  Tensor loss = loss_fn(model.forward(x), target);
  loss.backward();
  expect_close(loss, g.at("loss"), "loss");
  for (auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    expect_close(p.grad(), g.at("grad." + name), "gradient of " + name);
  }
  for (auto& [name, b] : model.named_buffers())
    expect_close(b, g.at("buffer." + name), "buffer " + name);

  opt.step();
  for (auto& [name, p] : model.named_parameters())
    expect_close(p, g.at("after." + name), "after the step: " + name);
  NoGradGuard guard;
  expect_close(loss_fn(model.forward(x), target), g.at("loss_after"), "loss after the step");
}

}  // namespace

TEST(Golden, MlpOneSgdStepMatchesPyTorch) {
  Golden g = read_golden("mlp.txt");
  auto mlp = std::make_shared<Sequential>(std::make_shared<Linear>(8, 16), std::make_shared<ReLU>(),
                                          std::make_shared<Linear>(16, 4));
  mlp->to(kF64);
  optim::SGD opt(mlp->parameters(),
                 {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
  CrossEntropyLoss ce({.label_smoothing = 0.1});
  check_one_step(
      *mlp, g, [&](const Tensor& y, const Tensor& t) { return ce(y, t); }, opt);
}

TEST(Golden, CnnOneAdamWStepMatchesPyTorch) {
  Golden g = read_golden("cnn.txt");
  auto cnn = std::make_shared<Sequential>(
      std::make_shared<Conv2d>(1, 4, 3, Conv2dOptions{.padding = 1, .bias = false}),
      std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Flatten>(), std::make_shared<Linear>(4 * 4 * 4, 3));
  cnn->to(kF64);
  optim::AdamW opt(cnn->parameters(), {.lr = 1e-2, .betas = {0.9, 0.99}, .weight_decay = 0.05});
  CrossEntropyLoss ce;
  check_one_step(
      *cnn, g, [&](const Tensor& y, const Tensor& t) { return ce(y, t); }, opt);
}
