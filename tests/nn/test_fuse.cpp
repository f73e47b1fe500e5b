// nn::fuse and the fused modules (nn/fuse.h, nn/fused.h) against the unfused model, the
// reference: forward values and every gradient in train and eval mode, which runs fuse finds and
// which it leaves alone, unchanged state_dict keys, parameter order and checkpoints both ways, the
// printed model, train/eval and to() reaching the original layers, and anomaly mode's composite.
// Leaves out: the fused kernels' own tests against their composites (tests/autograd,
// tests/kernels/cuda, BatchNorm2d.FusedBatchNormReluMaxPoolMatchesTheComposite in
// tests/nn/test_layers.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "nn/fuse.h"
#include "nn/fused.h"
#include "nn/models.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;

namespace {

bool near(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > 1e-12 * (1 + std::fabs(b[i]))) return false;
  return true;
}

// Conv2d(2, 4, 3, padding 1, no bias), BatchNorm2d, ReLU, MaxPool2d(2), Conv2d(4, 6, 3,
// padding 1), BatchNorm2d, ReLU, AdaptiveAvgPool2d(1), Flatten, Linear(6, 8), ReLU, Linear(8, 3).
// x: (N, 2, 6, 4) -> (N, 3). Every pattern of the table, seeded.
std::shared_ptr<Sequential> small_cnn(uint64_t seed) {
  manual_seed(seed);
  auto s = make<Sequential>(make<Conv2d>(2, 4, 3, Conv2dOptions{.padding = 1, .bias = false}),
                            make<BatchNorm2d>(4), make<ReLU>(), make<MaxPool2d>(2),
                            make<Conv2d>(4, 6, 3, Conv2dOptions{.padding = 1}),
                            make<BatchNorm2d>(6), make<ReLU>(), make<AdaptiveAvgPool2d>(1),
                            make<Flatten>(), make<Linear>(6, 8), make<ReLU>(), make<Linear>(8, 3));
  {  // BatchNorm weights and biases away from 1 and 0, so the ReLU clamps some channels
    NoGradGuard g;
    for (auto& [name, p] : s->named_parameters())
      if (name == "1.bias" || name == "5.bias") p.copy_(randn(p.shape()) * 0.5);
  }
  return s;
}

// Output, input gradient, every parameter's gradient and every buffer after one forward and
// backward of `m` on a seeded input.
std::vector<Tensor> run_once(Module& m) {
  Generator gen(31);
  Tensor x = randn({5, 2, 6, 4}, {}, &gen).requires_grad_();
  Tensor y = m(x);
  sum(y * randn(y.shape(), {}, &gen)).backward();
  std::vector<Tensor> out{y.detach(), x.grad()};
  for (auto& p : m.parameters()) out.push_back(p.grad());
  for (auto& b : m.buffers()) out.push_back(b.clone());
  return out;
}

// Outputs and buffers bit for bit; the gradients (entries 1 .. 1 + n_grads) to float rounding:
// the fused backward applies the ReLU mask inside batch norm's backward sums, one pass where the
// composite makes three, and the compiler may vectorise or contract those sums differently (on the
// H200 host's CPU, 2026-12-02, one convolution-bias gradient came out one float ulp apart; on the
// 2-core development machine every gradient is the same bit for bit).
void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, size_t n_grads,
                 const char* mode) {
  ASSERT_EQ(a.size(), b.size()) << mode;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape()) << mode << " entry " << i;
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    if (i == 0 || i > n_grads) {
      EXPECT_EQ(x, y) << mode << " entry " << i;
      continue;
    }
    for (size_t j = 0; j < x.size(); ++j)
      EXPECT_NEAR(x[j], y[j], 1e-6 * (1 + std::abs(x[j])))
          << mode << " entry " << i << "[" << j << "]";
  }
}

}  // namespace

// The fused model gives the unfused one's values and running statistics bit for bit on the CPU
// (its fused ops compose there from the same kernels) and its gradients to float rounding, in
// training and in eval (after a training step has moved the running statistics).
TEST(Fuse, FusedModelMatchesTheUnfusedInTrainAndEval) {
  auto ref = small_cnn(5), fused = small_cnn(5);
  ASSERT_EQ(fuse(*fused).size(), 3u);
  const size_t n_grads = 1 + ref->parameters().size();  // the input's and every parameter's
  auto r = run_once(*ref), f = run_once(*fused);
  expect_same(r, f, n_grads, "train");
  auto y = r[0].to_vector<double>();
  EXPECT_GT(std::count_if(y.begin(), y.end(), [](double v) { return v != 0; }), 0);
  ref->zero_grad();
  fused->zero_grad();
  ref->eval();
  fused->eval();
  expect_same(run_once(*ref), run_once(*fused), n_grads, "eval");
}

// Note [Fused modules keep the unfused keys]: the LinearReLU pair gives the composite's output
// and gradients (float64), and anomaly mode (which runs the original layers) the same again.
TEST(Fuse, LinearReluGivesTheCompositesValuesAndGradients) {
  manual_seed(4);
  auto seq = nn::make<nn::Sequential>(nn::make<nn::Linear>(5, 7), nn::make<nn::ReLU>(),
                                      nn::make<nn::Linear>(7, 2));
  seq->to(kF64);
  Tensor x = randn({9, 5}, {.dtype = kF64});
  auto l0 = seq->at<nn::Linear>(0), l2 = seq->at<nn::Linear>(2);
  ASSERT_EQ(fuse(*seq).size(), 1u);
  EXPECT_EQ(seq->at<nn::LinearReLU>(0)->linear, l0);
  auto grads = [&](const Tensor& y) {
    for (auto& p : seq->parameters()) p.set_grad(Tensor());
    sum(y * y).backward();
    std::vector<std::vector<double>> g;
    for (auto& p : seq->parameters()) g.push_back(p.grad().to_vector<double>());
    return g;
  };
  Tensor composite = matmul(relu(matmul(x, l0->weight.t()) + l0->bias), l2->weight.t()) + l2->bias;
  auto g_composite = grads(composite);
  Tensor fused = (*seq)(x);
  auto g_fused = grads(fused);
  Tensor unfused;
  {
    autograd::DetectAnomalyGuard anomaly;
    unfused = (*seq)(x);
  }
  auto g_unfused = grads(unfused);
  EXPECT_TRUE(near(fused.to_vector<double>(), composite.to_vector<double>()));
  EXPECT_TRUE(near(unfused.to_vector<double>(), composite.to_vector<double>()));
  ASSERT_EQ(g_fused.size(), 4u);
  for (size_t i = 0; i < g_fused.size(); ++i) {
    EXPECT_TRUE(near(g_fused[i], g_composite[i])) << "parameter " << i;
    EXPECT_TRUE(near(g_unfused[i], g_composite[i])) << "parameter " << i;
  }
  // Some pre-activations are negative, so the ReLU's mask is exercised.
  Tensor pre = matmul(x, l0->weight.t()) + l0->bias;
  auto v = pre.to_vector<double>();
  EXPECT_GT(std::count_if(v.begin(), v.end(), [](double a) { return a < 0; }), 0);
}

// The same for BatchNormReLU2d (training mode, batch statistics): output, parameter gradients,
// input gradient and running statistics as relu(bn(x)) computes them.
TEST(Fuse, BatchNormReluGivesTheCompositesValuesAndGradients) {
  manual_seed(6);
  auto run = [](bool fused) {
    auto seq = nn::make<nn::Sequential>(nn::make<nn::BatchNorm2d>(3), nn::make<nn::ReLU>());
    seq->to(kF64);
    auto bn = seq->at<nn::BatchNorm2d>(0);
    {
      NoGradGuard g;
      bn->weight.copy_(from_vector<double>({1.5, -0.5, 0.8}, {3}));
      bn->bias.copy_(from_vector<double>({0.1, 0.2, -0.3}, {3}));
    }
    Generator gen(9);
    Tensor x = randn({4, 3, 3, 2}, {.dtype = kF64}, &gen).requires_grad_();
    Tensor y;
    if (fused) {
      EXPECT_EQ(fuse(*seq).size(), 1u);
      y = (*seq)(x);
    } else {
      y = relu(bn->forward(x));
    }
    Generator gg(10);
    sum(y * randn(y.shape(), {.dtype = kF64}, &gg)).backward();
    return std::vector<Tensor>{y.detach(),
                               x.grad(),
                               bn->weight.grad(),
                               bn->bias.grad(),
                               bn->running_mean.clone(),
                               bn->running_var.clone()};
  };
  auto fused = run(true), composite = run(false);
  const char* what[] = {"output",    "input grad",   "weight grad",
                        "bias grad", "running_mean", "running_var"};
  for (size_t i = 0; i < fused.size(); ++i) {
    auto a = fused[i].to_vector<double>(), b = composite[i].to_vector<double>();
    ASSERT_EQ(a.size(), b.size()) << what[i];
    for (size_t j = 0; j < a.size(); ++j)
      EXPECT_NEAR(a[j], b[j], 1e-12 * (1 + std::fabs(b[j]))) << what[i] << " " << j;
  }
  auto y = fused[0].to_vector<double>();
  EXPECT_GT(std::count(y.begin(), y.end(), 0.0), 0) << "some outputs are clamped";
}

// A module holding a Sequential (fuse walks below the model it is given).
struct Holder : Module {
  Holder() : Module("Holder") {
    body = register_module("body", make<Sequential>(make<Linear>(3, 3), make<ReLU>()));
  }
  std::shared_ptr<Sequential> body;
};

// fuse finds exactly the table's runs, the longest first, in nested Sequentials and below other
// modules, and leaves every other layer where it was; a second call finds nothing.
TEST(Fuse, FindsThePatternsAndLeavesTheRestAlone) {
  auto s = make<Sequential>(
      make<Linear>(4, 4), make<GELU>(),                           // 0, 1: not a ReLU
      make<ReLU>(),                                               // 2: not after a Linear
      make<Linear>(4, 4), make<ReLU>(),                           // 3, 4: LinearReLU
      make<BatchNorm2d>(4), make<ReLU>(), make<MaxPool2d>(3),     // 5, 6: BatchNormReLU2d
      make<BatchNorm2d>(4), make<ReLU>(),                         // 8, 9: BatchNormReLU2d
      make<MaxPool2d>(2, MaxPool2dOptions{.stride = 1}),          // 10: stride 1, untouched
      make<BatchNorm2d>(4), make<ReLU>(), make<MaxPool2d>(2),     // 11-13: all three
      make<Sequential>(make<Linear>(4, 4), make<ReLU>()),         // 14: nested
      make<Conv2d>(4, 4, 3), make<ReLU>(),                        // 15, 16: no conv fusion
      make<BatchNorm2d>(4), make<Linear>(4, 4), make<Holder>());  // 17-19
  s->at<BatchNorm2d>(17)->eval();
  auto fusions = fuse(*s);
  EXPECT_EQ(fusion_summary(fusions),
            "nn::fuse: 6 fusions: 3 LinearReLU (+ 4), 5 BatchNormReLU2d (+ 6), 8 BatchNormReLU2d "
            "(+ 9), 11 BatchNormReLUMaxPool2d (+ 12 13), 14.0 LinearReLU (+ 14.1), 19.body.0 "
            "LinearReLU (+ 19.body.1)");
  const char* want[] = {"Linear",     "GELU",      "ReLU",
                        "LinearReLU", "Identity",  "BatchNormReLU2d",
                        "Identity",   "MaxPool2d", "BatchNormReLU2d",
                        "Identity",   "MaxPool2d", "BatchNormReLUMaxPool2d",
                        "Identity",   "Identity",  "Sequential",
                        "Conv2d",     "ReLU",      "BatchNorm2d",
                        "Linear",     "Holder"};
  ASSERT_EQ(s->size(), std::size(want));
  for (size_t i = 0; i < s->size(); ++i) EXPECT_EQ((*s)[i]->type_name(), want[i]) << "child " << i;
  EXPECT_EQ((*s->at<Sequential>(14))[0]->type_name(), "LinearReLU");
  EXPECT_EQ(fusion_summary(fuse(*s)), "nn::fuse: nothing to fuse");
  auto mlp = make_mlp(8);
  EXPECT_EQ(fusion_summary(fuse(*mlp)),
            "nn::fuse: 2 fusions: 1 LinearReLU (+ 2), 3 LinearReLU (+ 4)");
}

// Note [Fused modules keep the unfused keys]: the same state_dict keys in the same order, the
// same parameters (the very tensors) in the same order, and checkpoints load both ways.
TEST(Fuse, KeysParameterOrderAndCheckpointsAreUnchanged) {
  for (bool cnn : {false, true}) {
    auto a = cnn ? make_cnn() : make_mlp(16);
    const auto keys = names(a->state_dict());
    const auto params = a->named_parameters();
    fuse(*a);
    EXPECT_EQ(names(a->state_dict()), keys) << (cnn ? "cnn" : "mlp");
    const auto fused_params = a->named_parameters();
    ASSERT_EQ(fused_params.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(fused_params[i].first, params[i].first);
      EXPECT_TRUE(fused_params[i].second.is_same(params[i].second)) << params[i].first;
    }
  }
  // Unfused -> fused and fused -> unfused through a checkpoint file: the loaded model computes
  // what the saved one does.
  test::TempDir dir("loom_fuse");
  Tensor x = randn({3, 2, 6, 4});
  for (bool save_fused : {false, true}) {
    auto saved = small_cnn(11), loaded = small_cnn(12);
    (*saved)(x);  // a training step's running statistics, so the buffers differ from a fresh model
    fuse(save_fused ? *saved : *loaded);
    TrainingState st;
    st.model = saved->state_dict();
    std::string path = save_checkpoint(dir.path, save_fused ? 2 : 1, st);
    loaded->load_state_dict(load_checkpoint(path).model);
    saved->eval();
    loaded->eval();
    EXPECT_EQ((*loaded)(x).to_vector<double>(), (*saved)(x).to_vector<double>())
        << (save_fused ? "fused -> unfused" : "unfused -> fused");
  }
}

// The printed model shows what runs: the fused module with the layers it runs as one, and an
// Identity in each absorbed layer's place.
TEST(Fuse, PrintedModelShowsTheFusedModules) {
  auto s = make<Sequential>(make<Linear>(2, 3), make<ReLU>(), make<BatchNorm2d>(3), make<ReLU>(),
                            make<MaxPool2d>(2));
  fuse(*s);
  std::ostringstream os;
  os << *s;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): LinearReLU(Linear(in_features=2, out_features=3, bias=true), ReLU())\n"
            "  (1): Identity(ReLU, fused into 0)\n"
            "  (2): BatchNormReLUMaxPool2d(BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=true, "
            "track_running_stats=true), ReLU(), MaxPool2d(kernel_size=(2, 2), stride=(2, 2), "
            "padding=(0, 0)))\n"
            "  (3): Identity(ReLU, fused into 2)\n"
            "  (4): Identity(MaxPool2d, fused into 2)\n"
            ")");
}

// train()/eval() and to() reach the original layers; the fused op runs (one graph node), and in
// anomaly mode the original layers run one by one.
TEST(Fuse, ModesPlacementAndTheAnomalyFallback) {
  auto s = make<Sequential>(make<BatchNorm2d>(2), make<ReLU>(), make<Flatten>(), make<Linear>(8, 4),
                            make<ReLU>());
  auto bn = s->at<BatchNorm2d>(0);
  auto lin = s->at<Linear>(3);
  fuse(*s);
  s->eval();
  EXPECT_FALSE(bn->is_training());
  s->train();
  EXPECT_TRUE(bn->is_training());
  s->to(kF64);
  EXPECT_EQ(lin->weight.dtype(), kF64);
  EXPECT_EQ(bn->running_mean.dtype(), kF64);
  Tensor x = randn({3, 2, 2, 2}, {.dtype = kF64});
  EXPECT_STREQ((*s)(x).grad_fn()->name, "linear");
  EXPECT_STREQ(s->at<BatchNormReLU2d>(0)->forward(x).grad_fn()->name, "batch_norm");
  autograd::DetectAnomalyGuard anomaly;
  EXPECT_STREQ((*s)(x).grad_fn()->name, "relu");
  EXPECT_STREQ(s->at<BatchNormReLU2d>(0)->forward(x).grad_fn()->name, "relu");
}

// The fused modules refuse what they cannot run, naming it.
TEST(Fuse, FusedModulesRefuseWrongParts) {
  try {
    BatchNormReLUMaxPool2d(make<BatchNorm2d>(2), make<ReLU>(), make<MaxPool2d>(3));
    FAIL() << "a 3 x 3 pooling was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel_size=(3, 3)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LinearReLU(nullptr, make<ReLU>()), Error);
  EXPECT_THROW(make<Sequential>(make<ReLU>())->replace(1, make<ReLU>()), Error);
}
