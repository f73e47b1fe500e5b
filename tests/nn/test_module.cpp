// nn::Module: registration and dotted names, state_dict round trips, load_state_dict errors that
// list every problem, train/eval, to(dtype), zero_grad, Sequential naming and printing.
#include <gtest/gtest.h>

#include <sstream>

#include "autograd/ops/ops.h"
#include "nn/layers.h"
#include "support/errors.h"

using loom::test::expect_error;
using namespace loom;
using namespace loom::nn;

namespace {

// A small model with nested children, a buffer and a shared submodule.
struct Block : Module {
  std::shared_ptr<Linear> fc;
  std::shared_ptr<BatchNorm2d> bn;
  Tensor scale, counter;
  Block() : Module("Block") {
    fc = register_module("fc", std::make_shared<Linear>(4, 3));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(3));
    scale = ones({3});
    register_parameter("scale", scale);
    counter = zeros({1});
    register_buffer("counter", counter, /*persistent=*/false);
  }
};

std::shared_ptr<Sequential> make_mlp() {
  return std::make_shared<Sequential>(std::make_shared<Linear>(8, 16), std::make_shared<ReLU>(),
                                      std::make_shared<Linear>(16, 4));
}

std::vector<std::string> keys(const NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

}  // namespace

TEST(Module, DottedNamesInRegistrationOrder) {
  auto outer = std::make_shared<Sequential>();
  outer->push_back(std::make_shared<Block>());
  outer->push_back(std::make_shared<Linear>(3, 2, /*bias=*/false));
  EXPECT_EQ(keys(outer->named_parameters()),
            (std::vector<std::string>{"0.scale", "0.fc.weight", "0.fc.bias", "0.bn.weight",
                                      "0.bn.bias", "1.weight"}));
  EXPECT_EQ(keys(outer->named_buffers()),
            (std::vector<std::string>{"0.counter", "0.bn.running_mean", "0.bn.running_var",
                                      "0.bn.num_batches_tracked"}));
  // The parameters carry their dotted names (DDP and optimizer errors use them).
  for (auto& [n, p] : outer->named_parameters()) {
    EXPECT_EQ(p.name(), n);
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(outer->parameters().size(), 6u);
  EXPECT_EQ(outer->parameters(/*recurse=*/false).size(), 0u);
  auto mods = outer->named_modules();
  ASSERT_EQ(mods.size(), 5u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[3].first, "0.fc");
  EXPECT_EQ(mods[4].first, "0.bn");
}

TEST(Module, StateDictOrderMatchesPyTorch) {
  // PyTorch: each module's parameters, then its persistent buffers, then its children.
  auto b = std::make_shared<Block>();
  EXPECT_EQ(
      names(b->state_dict()),
      (std::vector<std::string>{"scale", "fc.weight", "fc.bias", "bn.weight", "bn.bias",
                                "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}));
}

TEST(Module, RejectsBadNames) {
  struct Bad : Module {
    Tensor w = zeros({2}), v = zeros({2});
    Bad() : Module("Bad") { register_parameter("w", w); }
    void add(const std::string& n) { register_parameter(n, v); }
  };
  Bad m;
  EXPECT_THROW(m.add("w"), Error);
  EXPECT_THROW(m.add("a.b"), Error);
  EXPECT_THROW(m.add(""), Error);
}

TEST(Module, StateDictRoundTrip) {
  manual_seed(1);
  auto a = make_mlp();
  manual_seed(2);
  auto b = make_mlp();
  Tensor x = randn({5, 8});
  EXPECT_GT((a->forward(x) - b->forward(x)).pow(2.0).sum().item(), 1e-6);
  StateDict sd = a->state_dict();
  EXPECT_EQ(names(sd), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  LoadResult r = b->load_state_dict(sd);
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_EQ(a->forward(x).to_vector<float>(), b->forward(x).to_vector<float>());
  // Loaded by value: changing a afterwards leaves b alone.
  {
    NoGradGuard g;
    a->at<Linear>(0)->weight.fill_(0.0);
  }
  EXPECT_NE(b->at<Linear>(0)->weight.to_vector<float>()[0], 0.0f);
  // state_dict entries are detached views of the live tensors.
  EXPECT_FALSE(sd[0].second.requires_grad());
  EXPECT_EQ(sd[0].second.to_vector<float>()[0], 0.0f);
}

TEST(Module, LoadStateDictListsEveryProblem) {
  auto m = make_mlp();
  StateDict sd = m->state_dict();
  StateDict bad;
  bad.emplace_back("0.weight", zeros({16, 7}));  // wrong shape
  // "0.bias" missing
  bad.emplace_back("2.weight", sd[2].second);
  bad.emplace_back("2.bias", sd[3].second);
  bad.emplace_back("3.extra", zeros({1}));  // unexpected
  std::vector<float> before = m->at<Linear>(2)->weight.to_vector<float>();
  expect_error([&] { m->load_state_dict(bad); },
               {"Sequential.load_state_dict", "0.weight (expected [16, 8], got [16, 7])",
                "missing: 0.bias", "unexpected: 3.extra"});
  // Non-strict: missing and unexpected are reported, the wrong shape is still an error.
  expect_error([&] { m->load_state_dict(bad, /*strict=*/false); }, {"0.weight"});
  EXPECT_EQ(m->at<Linear>(2)->weight.to_vector<float>(), before);  // nothing loaded
  bad[0].second = zeros({16, 8});
  LoadResult r = m->load_state_dict(bad, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"0.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"3.extra"}));
  EXPECT_EQ(m->at<Linear>(0)->weight.to_vector<float>()[5], 0.0f);
}

TEST(Module, LoadConvertsDtype) {
  auto m = make_mlp();
  StateDict sd64;
  for (auto& [n, t] : m->state_dict()) sd64.emplace_back(n, (t * 2.0).to(kF64));
  auto w = m->at<Linear>(0)->weight.to_vector<float>();
  m->load_state_dict(sd64);
  EXPECT_EQ(m->at<Linear>(0)->weight.dtype(), kF32);
  EXPECT_FLOAT_EQ(m->at<Linear>(0)->weight.to_vector<float>()[3], 2 * w[3]);
}

TEST(Module, TrainEvalIsRecursive) {
  auto outer =
      std::make_shared<Sequential>(std::make_shared<Block>(), std::make_shared<Dropout>(0.5));
  EXPECT_TRUE(outer->is_training());
  outer->eval();
  for (auto& [n, m] : outer->named_modules()) EXPECT_FALSE(m->is_training()) << n;
  outer->train();
  for (auto& [n, m] : outer->named_modules()) EXPECT_TRUE(m->is_training()) << n;
}

TEST(Module, ToFloat64KeepsNamesAndRequiresGrad) {
  auto b = std::make_shared<Block>();
  std::vector<float> w = b->fc->weight.to_vector<float>();
  // Give one parameter a gradient: it must follow.
  b->fc->weight.set_grad(ones({3, 4}));
  b->to(kF64);
  for (auto& [n, p] : b->named_parameters()) {
    EXPECT_EQ(p.dtype(), kF64) << n;
    EXPECT_TRUE(p.requires_grad()) << n;
    EXPECT_TRUE(p.is_leaf()) << n;
    EXPECT_EQ(p.name(), n);
  }
  EXPECT_EQ(b->fc->weight.grad().dtype(), kF64);
  EXPECT_EQ(b->bn->running_mean.dtype(), kF64);
  EXPECT_EQ(b->bn->num_batches_tracked.dtype(), kI64);  // integer buffers keep their dtype
  EXPECT_EQ(b->counter.dtype(), kF64);                  // non-persistent buffers move too
  std::vector<double> w64 = b->fc->weight.to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w64[i], double(w[i]));
  // Forward and backward work in float64.
  Tensor y = b->fc->forward(randn({2, 4}, {.dtype = kF64}));
  y.sum().backward();
  EXPECT_EQ(b->fc->bias.grad().dtype(), kF64);
  EXPECT_THROW(b->to(kI64), Error);
}

TEST(Module, TiedParametersStayTied) {
  struct Tied : Module {
    std::shared_ptr<Linear> a, b;
    Tied() : Module("Tied") {
      a = register_module("a", std::make_shared<Linear>(3, 3));
      b = register_module("b", a);  // the same module twice
    }
  };
  auto t = std::make_shared<Tied>();
  EXPECT_EQ(t->parameters().size(), 2u);  // listed once
  // Saved once, under the first name (as safetensors' save_model keeps one name of a shared
  // tensor; PyTorch's state_dict would list it under both), and loaded back tied.
  StateDict sd = t->state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "a.weight");
  EXPECT_EQ(sd[1].first, "a.bias");
  t->to(kF64);
  EXPECT_TRUE(t->a->weight.is_same(t->b->weight));
  auto u = std::make_shared<Tied>();
  u->to(kF64);
  u->load_state_dict(t->state_dict());
  EXPECT_TRUE(u->a->weight.is_same(u->b->weight));
  EXPECT_EQ(u->b->weight.to_vector<double>(), t->a->weight.to_vector<double>());
}

TEST(Module, ZeroGradClearsGradients) {
  auto m = make_mlp();
  m->forward(randn({3, 8})).sum().backward();
  for (auto& p : m->parameters()) EXPECT_TRUE(p.grad().defined());
  m->zero_grad();
  for (auto& p : m->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Sequential, NamesChildrenAndRuns) {
  Sequential s({std::make_shared<Linear>(2, 3), std::make_shared<ReLU>()});
  s.push_back(std::make_shared<Flatten>());
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.named_children()[2].first, "2");
  EXPECT_EQ(s[1]->type_name(), "ReLU");
  EXPECT_THROW(s[3], Error);
  EXPECT_THROW(s.at<Linear>(1), Error);
  Tensor y = s.forward(randn({4, 2}));
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  for (float v : y.to_vector<float>()) EXPECT_GE(v, 0.0f);
}

TEST(Module, Prints) {
  auto m =
      std::make_shared<Sequential>(std::make_shared<Conv2d>(1, 4, 3, Conv2dOptions{.padding = 1}),
                                   std::make_shared<ReLU>(), std::make_shared<Linear>(8, 2));
  std::ostringstream os;
  os << *m;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "  (1): ReLU()\n"
            "  (2): Linear(in_features=8, out_features=2, bias=true)\n"
            ")");
}

TEST(Module, ForwardWithoutOverrideIsAnError) {
  Module m("Plain");
  expect_error([&] { m(zeros({1})); }, {"Plain", "forward"});
}

// Note [Forward hooks]: the pair runs around operator() (a Sequential's children too) and
// call_hooked; `after` may replace the outputs; a second owner is refused by name.
TEST(Module, ForwardHooksRunAroundEachCallAndMayReplaceTheOutput) {
  auto lin = std::make_shared<Linear>(3, 2);
  Sequential seq(lin, std::make_shared<ReLU>());
  std::vector<std::string> log;
  lin->set_forward_hooks({[&](Module& m) { log.push_back("before " + m.type_name()); },
                          [&](Module&, std::vector<Tensor>& out) {
                            log.push_back("after");
                            out[0] = out[0] * 0.0 + 7.0;
                          }});
  Tensor y = seq(ones({4, 3}));
  EXPECT_EQ(log, (std::vector<std::string>{"before Linear", "after"}));
  EXPECT_EQ(min(y).item(), 7.0);     // relu(7) of the replaced output
  (void)lin->forward(ones({1, 3}));  // a direct forward() bypasses them
  EXPECT_EQ(log.size(), 2u);
  auto out = lin->call_hooked([&] { return std::vector<Tensor>{zeros({1}), zeros({1})}; });
  EXPECT_EQ(log.size(), 4u);
  EXPECT_EQ(out[0].item(), 7.0);  // replaced by `after`
  EXPECT_EQ(out[1].item(), 0.0);
  try {
    lin->set_forward_hooks({});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Linear.set_forward_hooks"), std::string::npos);
  }
  lin->clear_forward_hooks();
  EXPECT_NE(max(seq(ones({1, 3}))).item(), 7.0);  // no hooks: the real output
}
