// The module API a program sees: nn::make and ModuleHolder (no std::make_shared at call sites),
// LayerNorm from a plain size, losses called through const references, and Module::to moving
// parameters in place so that an optimizer built before it updates the moved parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "nn/holder.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"

using namespace loom;
using namespace loom::nn;

namespace {

// A user's model as the docs write it: members are holders, built by nn::make.
struct Net : Module {
  ModuleHolder<Linear> fc1, fc2;
  ModuleHolder<LayerNorm> norm;
  Net() : Module("Net") {
    fc1 = register_module("fc1", make<Linear>(3, 4));
    norm = register_module("norm", make<LayerNorm>(4));
    fc2 = register_module("fc2", make<Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override { return fc2(norm(fc1(x).relu())); }
};

}  // namespace

TEST(ModuleHolder, MakeBuildsCallableModules) {
  manual_seed(1);
  auto model = make<Sequential>(make<Linear>(3, 4), make<ReLU>(), make<Linear>(4, 2));
  std::vector<std::string> names;
  for (auto& [n, p] : model->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  Tensor x = randn({5, 3});
  // model(x) is model->forward(x), and that is the layers' math done by hand.
  Tensor y = model(x);
  auto fc0 = model->at<Linear>(0), fc2 = model->at<Linear>(2);
  Tensor hidden = (matmul(x, fc0->weight.t()) + fc0->bias).relu();
  Tensor want = matmul(hidden, fc2->weight.t()) + fc2->bias;
  ASSERT_EQ(y.shape(), (Shape{5, 2}));
  std::vector<float> got = y.to_vector<float>(), ref = want.to_vector<float>(),
                     fwd = model->forward(x).to_vector<float>();
  EXPECT_EQ(got, fwd);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5) << i;
}

TEST(ModuleHolder, MembersOfAUserModel) {
  auto net = make<Net>();
  std::vector<std::string> names;
  for (auto& [n, p] : net->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "norm.weight", "norm.bias",
                                             "fc2.weight", "fc2.bias"}));
  // The holders are the registered modules, not copies.
  EXPECT_TRUE(net->fc1->weight.is_same(net->parameters()[0]));
  EXPECT_EQ(net(randn({2, 3})).shape(), (Shape{2, 2}));
  // A holder of the base type holds any module; an empty one is an error when called.
  ModuleHolder<Module> any = make<Linear>(3, 1);
  EXPECT_EQ(any(randn({2, 3})).shape(), (Shape{2, 1}));
  ModuleHolder<Linear> empty;
  EXPECT_THROW(empty(randn({2, 3})), Error);
}

TEST(LayerNorm, TakesAPlainSize) {
  auto ln = make<LayerNorm>(4);
  EXPECT_EQ(ln->normalized_shape, (Shape{4}));
  EXPECT_EQ(ln->weight.shape(), (Shape{4}));
  // Normalises over the last dim: each row of the output has mean 0 and (biased) variance 1.
  Tensor x = from_vector<float>({1, 2, 3, 4, -2, 0, 2, 4}, {2, 4});
  std::vector<float> y = ln(x).to_vector<float>();
  // Row 0: mean 2.5, var 1.25; row 1: mean 1, var 5.
  const double eps = 1e-5;
  const float want[8] = {float(-1.5 / std::sqrt(1.25 + eps)), float(-0.5 / std::sqrt(1.25 + eps)),
                         float(0.5 / std::sqrt(1.25 + eps)),  float(1.5 / std::sqrt(1.25 + eps)),
                         float(-3 / std::sqrt(5 + eps)),      float(-1 / std::sqrt(5 + eps)),
                         float(1 / std::sqrt(5 + eps)),       float(3 / std::sqrt(5 + eps))};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[size_t(i)], want[i], 1e-6) << i;
  EXPECT_EQ(LayerNorm(Shape{2, 4}).normalized_shape, (Shape{2, 4}));
}

TEST(Loss, ModulesAreConstCallable) {
  const CrossEntropyLoss ce;
  const MSELoss mse;
  const auto nll = make<NLLLoss>();  // a const holder calls too
  Tensor logits = from_vector<float>({0, 0, 0, 0, std::log(3.0f), 0}, {2, 3});
  Tensor target = from_vector<int64_t>({1, 1}, {2});
  // Row 0: uniform, -log(1/3); row 1: p(class 1) = 3/5 -> -log(3/5). Mean of the two.
  double want = (std::log(3.0) - std::log(3.0 / 5.0)) / 2.0;
  EXPECT_NEAR(ce(logits, target).item(), want, 1e-6);
  EXPECT_NEAR(nll(log_softmax(logits, 1), target).item(), want, 1e-6);
  Tensor a = from_vector<float>({1, 2, 3}, {3}), b = from_vector<float>({1, 0, 0}, {3});
  EXPECT_NEAR(mse(a, b).item(), (0.0 + 4.0 + 9.0) / 3.0, 1e-6);
}

TEST(ModuleTo, OptimizerBuiltBeforeToUpdatesTheMovedParameters) {
  auto fc = make<Linear>(2, 2);
  optim::SGD opt(fc->parameters(), {.lr = 0.5});
  fc->to(kF64);
  ASSERT_EQ(fc->weight.dtype(), kF64);
  // The optimizer holds the very tensors the module reads.
  EXPECT_TRUE(opt.params(0)[0].is_same(fc->weight));
  EXPECT_TRUE(opt.params(0)[1].is_same(fc->bias));
  std::vector<double> w0 = fc->weight.to_vector<double>(), b0 = fc->bias.to_vector<double>();
  // loss = sum(x W^T + b) over two rows: each row of dL/dW is x0 + x1 = (4, 6), dL/db = (2, 2).
  Tensor x = from_vector<double>({1, 2, 3, 4}, {2, 2});
  opt.zero_grad();
  fc(x).sum().backward();
  opt.step();
  std::vector<double> w1 = fc->weight.to_vector<double>(), b1 = fc->bias.to_vector<double>();
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(w1[2 * r], w0[2 * r] - 0.5 * 4.0) << r;
    EXPECT_DOUBLE_EQ(w1[2 * r + 1], w0[2 * r + 1] - 0.5 * 6.0) << r;
    EXPECT_DOUBLE_EQ(b1[r], b0[r] - 0.5 * 2.0) << r;
  }
}

TEST(ModuleTo, KeepsGradientsAndTiesInPlace) {
  auto net = make<Net>();
  Tensor w = net->fc1->weight;  // a handle taken before to()
  w.set_grad(full({4, 3}, 2.0));
  net->to(kF64);
  EXPECT_TRUE(w.is_same(net->fc1->weight));
  EXPECT_EQ(w.dtype(), kF64);
  ASSERT_EQ(w.grad().dtype(), kF64);
  for (double g : w.grad().to_vector<double>()) EXPECT_EQ(g, 2.0);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(w.name(), "fc1.weight");
}

TEST(ModuleTo, AfterTheOptimizersFirstStepIsAnError) {
  auto fc = make<Linear>(2, 1);
  optim::Adam opt(fc->parameters(), {.lr = 0.1});
  fc(randn({3, 2})).sum().backward();
  opt.step();  // Adam's state is now float32
  fc->to(kF64);
  opt.zero_grad();
  fc(randn({3, 2}, {.dtype = kF64})).sum().backward();
  try {
    opt.step();
    FAIL() << "step after moving the model must throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("Adam.step: the state of \"weight\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("moved with to() after the optimizer's first step"), std::string::npos)
        << msg;
  }
}

// What Module::to builds on: the tensor keeps its identity and autograd metadata, takes the data.
TEST(TensorSetData, KeepsIdentityAndRefusesIntegersForGradTensors) {
  Tensor p = from_vector<float>({1, 2, 3}, {3});
  p.requires_grad_(true);
  p.set_name("p");
  Tensor handle = p;
  p.set_data(from_vector<double>({4, 5, 6, 7}, {2, 2}));
  EXPECT_TRUE(handle.is_same(p));
  EXPECT_EQ(handle.dtype(), kF64);
  EXPECT_EQ(handle.shape(), (Shape{2, 2}));
  EXPECT_EQ(handle.to_vector<double>(), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_EQ(handle.name(), "p");
  EXPECT_THROW(p.set_data(from_vector<int64_t>({1}, {1})), Error);
  EXPECT_EQ(p.dtype(), kF64);                // unchanged by the refused call
  EXPECT_THROW(p.set_data(p * 2.0), Error);  // not a leaf
}
