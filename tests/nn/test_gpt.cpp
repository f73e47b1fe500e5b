// GPT (nn/gpt.h) against the same model written with loom's primitive ops (index_select, matmul,
// a masked softmax, layer norm and the tanh GELU from their formulas): the loss of every one of
// 50 AdamW steps, weight tying (one tensor, both gradients summed, saved once, resumed), the
// parameter count, the KV cache against recomputing the prefix and against the primitive-op model
// at each cached position, sampling, StepRunner with the model's own loss, and the errors.
// Leaves out: the ops' own tests (tests/autograd) and train_gpt
// (tests/examples/test_train_gpt.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "nn/clip.h"
#include "nn/gpt.h"
#include "nn/gpt_sample.h"
#include "nn/optim/adam.h"
#include "support/temp_files.h"
#include "train/step_runner.h"

using namespace loom;
using namespace loom::nn;

namespace {

GPTConfig tiny(int64_t layers = 2, int64_t width = 64) {
  return GPTConfig{
      .vocab_size = 37, .block_size = 16, .n_layer = layers, .n_head = 4, .n_embd = width};
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  manual_seed(seed);
  return randint(0, V, {B, T});
}

// ---------------------------------------------------------------- the primitive-op reference

// The model's parameters by name, cloned into leaves of their own (tied: one entry).
using Params = std::map<std::string, Tensor>;
Params clone_params(const GPT& m) {
  Params p;
  for (const auto& [name, t] : m.named_parameters())
    p[name] = t.detach().clone().requires_grad_(true);
  return p;
}

Tensor ref_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor mu = mean(x, {-1}, true);
  Tensor var = mean(square(x - mu), {-1}, true);
  return (x - mu) * rsqrt(var + 1e-5) * w + b;
}

Tensor ref_gelu_tanh(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

Tensor ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return matmul(x, transpose(w, 0, 1)) + b;
}

// idx (B, T) -> logits (B, T, V), written out in primitive ops. `head` is the output matrix (the
// tied wte.weight, or a separate copy to split the gradient of the two uses).
Tensor ref_forward(const Params& p, const Tensor& head, const Tensor& idx, const GPTConfig& c) {
  int64_t B = idx.size(0), T = idx.size(1), C = c.n_embd, H = c.n_head, D = C / H;
  Tensor x = view(index_select(p.at("wte.weight"), 0, flatten(idx)), {B, T, C}) +
             index_select(p.at("wpe.weight"), 0, arange(0, double(T)));
  Tensor causal =
      lt(arange(0, double(T)).view({T, 1}), arange(0, double(T)).view({1, T}));  // j > i
  for (int64_t l = 0; l < c.n_layer; ++l) {
    auto P = [&](const std::string& n) { return p.at(str("h.", l, ".", n)); };
    Tensor a = ref_layer_norm(x, P("ln_1.weight"), P("ln_1.bias"));
    Tensor qkv = ref_linear(a, P("attn.c_attn.weight"), P("attn.c_attn.bias"));  // (B, T, 3C)
    auto head_of = [&](int64_t i) {                                              // (B, H, T, D)
      return permute(view(slice(qkv, 2, i * C, (i + 1) * C), {B, T, H, D}), {0, 2, 1, 3});
    };
    Tensor s = matmul(head_of(0), transpose(head_of(1), 2, 3)) * (1.0 / std::sqrt(double(D)));
    s = where(causal, full_like(s, -INFINITY), s);
    Tensor y = matmul(softmax(s, -1), head_of(2));  // (B, H, T, D)
    y = reshape(permute(y, {0, 2, 1, 3}), {B, T, C});
    x = x + ref_linear(y, P("attn.c_proj.weight"), P("attn.c_proj.bias"));
    Tensor m = ref_layer_norm(x, P("ln_2.weight"), P("ln_2.bias"));
    m = ref_gelu_tanh(ref_linear(m, P("mlp.c_fc.weight"), P("mlp.c_fc.bias")));
    x = x + ref_linear(m, P("mlp.c_proj.weight"), P("mlp.c_proj.bias"));
  }
  x = ref_layer_norm(x, p.at("ln_f.weight"), p.at("ln_f.bias"));
  return matmul(x, transpose(head, 0, 1));
}

Tensor ref_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(flatten(logits, 0, 1), flatten(targets));
}

// AdamW with GPT-2's two groups (decay on matrices only), over `params` in the model's order.
std::unique_ptr<optim::AdamW> gpt_adamw(const std::vector<Tensor>& params) {
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamWOptions o{.lr = 1e-3, .betas = {0.9, 0.95}, .weight_decay = 0.1};
  auto opt = std::make_unique<optim::AdamW>(decay, o);
  o.weight_decay = 0.0;
  opt->add_param_group(no_decay, o);
  return opt;
}

}  // namespace

TEST(GPT, LossOfFiftyStepsEqualsThePrimitiveOpModel) {
  GPTConfig c = tiny();
  manual_seed(1);
  GPT model(c);
  Params ref = clone_params(model);
  std::vector<Tensor> ref_list;
  for (const auto& [name, t] : model.named_parameters()) ref_list.push_back(ref.at(name));
  auto opt = gpt_adamw(model.parameters());
  auto ref_opt = gpt_adamw(ref_list);
  for (int step = 0; step < 50; ++step) {
    Tensor idx = random_ids(3, 12, c.vocab_size, 100 + step);
    Tensor tgt = random_ids(3, 12, c.vocab_size, 200 + step);
    opt->zero_grad();
    Tensor loss = model.loss(idx, tgt);
    loss.backward();
    opt->step();
    ref_opt->zero_grad();
    Tensor rl = ref_loss(ref_forward(ref, ref.at("wte.weight"), idx, c), tgt);
    rl.backward();
    ref_opt->step();
    ASSERT_NEAR(loss.item<float>(), rl.item<float>(), 1e-5) << "step " << step;
  }
}

// StepRunner takes the model's own loss (nn::Module::has_loss: the head and cross-entropy as one
// op, linear_cross_entropy) and trains the weights a loop over forward's logits trains.
TEST(GPT, StepRunnerTrainsWithTheModelsOwnLoss) {
  GPTConfig c = tiny();
  manual_seed(3);
  GPT a(c), b(c);
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    NoGradGuard g;
    b.parameters()[i].copy_(a.parameters()[i]);
  }
  EXPECT_TRUE(a.has_loss());
  auto oa = gpt_adamw(a.parameters()), ob = gpt_adamw(b.parameters());
  train::StepRunner runner(a, *oa, 0.0, false);
  runner.set_grad_clip(1.0);
  for (int step = 0; step < 3; ++step) {
    Tensor idx = random_ids(3, 12, c.vocab_size, 300 + step);
    Tensor tgt = random_ids(3, 12, c.vocab_size, 400 + step);
    Tensor la = runner.step(idx, tgt);
    ob->zero_grad();
    Tensor lb =
        cross_entropy(flatten(b.forward(idx), 0, 1), flatten(tgt), Reduction::Mean, 0.0, -1);
    lb.backward();
    nn::clip_grad_norm_(b.parameters(), 1.0);
    ob->step();
    EXPECT_NEAR(la.item<float>(), lb.item<float>(), 1e-5) << "step " << step;
  }
  for (size_t i = 0; i < a.parameters().size(); ++i)
    EXPECT_LT(max(abs(a.parameters()[i] - b.parameters()[i])).item<float>(), 1e-5) << i;
}

TEST(GPT, TiedEmbeddingIsOneTensorWhoseGradientSumsBothUses) {
  GPTConfig c = tiny(1, 32);
  manual_seed(2);
  GPT model(c);
  EXPECT_TRUE(model.lm_head->weight.is_same(model.wte->weight));
  int64_t tied = 0;
  for (const auto& [name, t] : model.named_parameters()) tied += t.is_same(model.wte->weight);
  EXPECT_EQ(tied, 1);
  EXPECT_EQ(model.named_parameters()[0].first, "wte.weight");
  EXPECT_EQ(model.wte->weight.name(), "wte.weight");

  Tensor idx = random_ids(2, 9, c.vocab_size, 3), tgt = random_ids(2, 9, c.vocab_size, 4);
  model.loss(idx, tgt).backward();
  // The reference with the two uses as two tensors: their gradients add up to the tied one's.
  Params ref = clone_params(model);
  Tensor head = model.wte->weight.detach().clone().requires_grad_(true);
  ref_loss(ref_forward(ref, head, idx, c), tgt).backward();
  Tensor sum = ref.at("wte.weight").grad() + head.grad();
  EXPECT_LT(max(abs(model.wte->weight.grad() - sum)).item<float>(), 1e-6);
  EXPECT_GT(max(abs(head.grad())).item<float>(), 1e-3);  // both uses contribute
  EXPECT_GT(max(abs(ref.at("wte.weight").grad())).item<float>(), 1e-3);
}

TEST(GPT, TiedEmbeddingIsSavedOnceAndResumesTied) {
  GPTConfig c = tiny(1, 32);
  manual_seed(5);
  GPT a(c);
  StateDict sd = a.state_dict();
  int64_t n_wte = 0, n_head = 0;
  for (const auto& [name, t] : sd)
    n_wte += name == "wte.weight", n_head += name == "lm_head.weight";
  EXPECT_EQ(n_wte, 1);
  EXPECT_EQ(n_head, 0);
  test::TempDir dir;
  TrainingState st;
  st.model = sd;
  std::string path = save_checkpoint(dir.path, 1, st);
  manual_seed(6);
  GPT b(c);
  b.load_state_dict(load_checkpoint(path).model);
  EXPECT_TRUE(b.lm_head->weight.is_same(b.wte->weight));
  Tensor idx = random_ids(2, 7, c.vocab_size, 7);
  EXPECT_EQ(a.forward(idx).to_vector<float>(), b.forward(idx).to_vector<float>());
}

TEST(GPT, ParameterCountIsGpt2sFormula) {
  GPTConfig c = tiny(3, 48);
  GPT m(c);
  int64_t V = c.vocab_size, T = c.block_size, C = c.n_embd, L = c.n_layer;
  // Embeddings (the head is the same matrix), 12 C^2 + 13 C per block, the final LayerNorm.
  EXPECT_EQ(m.num_parameters(), V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_EQ(m.num_parameters(false), m.num_parameters() - T * C);
  EXPECT_DOUBLE_EQ(m.flops_per_token(T),
                   6.0 * double(m.num_parameters(false)) + 12.0 * double(L * C * T));
  // GPT-2 small's published count, 124M: V = 50257, T = 1024, 12 x 768 (by the formula, without
  // allocating the model).
  int64_t v = 50257, t = 1024, cc = 768;
  EXPECT_EQ(v * cc + t * cc + 12 * (12 * cc * cc + 13 * cc) + 2 * cc, 124439808);
}

TEST(GPT, KvCacheGivesTheTokensOfRecomputingThePrefix) {
  GPTConfig c = tiny();
  manual_seed(8);
  GPT m(c);
  SampleOptions o{.max_new_tokens = 10, .temperature = 0.0};
  std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  auto cached = generate(m, prompt, o);
  o.use_cache = false;
  EXPECT_EQ(cached, generate(m, prompt, o));
  // Sampled (temperature 1, top-k 5) the same stream gives the same tokens both ways.
  o = {.max_new_tokens = 10, .temperature = 1.0, .top_k = 5, .seed = 3};
  auto sampled = generate(m, prompt, o);
  o.use_cache = false;
  EXPECT_EQ(sampled, generate(m, prompt, o));
  EXPECT_TRUE(m.is_training());  // generate restores the mode
  // The logits of a cached step equal the full forward's last position.
  KVCache cache;
  Tensor ids = random_ids(1, 6, c.vocab_size, 9);
  m.eval();
  NoGradGuard g;
  m.forward(slice(ids, 1, 0, 5), cache);
  Tensor step = m.forward(slice(ids, 1, 5, 6), cache);
  Tensor full = m.forward(ids);
  EXPECT_LT(max(abs(select(step, 1, 0) - select(full, 1, 5))).item<float>(), 1e-5);
  EXPECT_EQ(cache.length, 6);
}

// The KV cache's positions, against the primitive-op model on the whole prefix: a prompt of 4, then
// 5 cached steps of one token, for a batch of 2. The position table is drawn with spread 1 (GPT's
// init gives 0.02), so a token embedded at the wrong position changes the logits (below 0.3) by
// far more than 1e-6, about 60 float32 roundings of them (measured: 4.5e-8).
TEST(GPT, EachCachedStepIsThePrimitiveModelAtItsPosition) {
  GPTConfig c = tiny(2, 32);
  manual_seed(10);
  GPT m(c);
  {
    NoGradGuard g;
    m.wpe->weight.copy_(randn(m.wpe->weight.shape()));
  }
  Params ref = clone_params(m);
  Tensor ids = random_ids(2, 9, c.vocab_size, 11);
  m.eval();
  NoGradGuard g;
  KVCache cache;
  Tensor prompt = m.forward(slice(ids, 1, 0, 4), cache);  // (2, 4, V)
  EXPECT_EQ(cache.length, 4);
  Tensor want = ref_forward(ref, ref.at("wte.weight"), slice(ids, 1, 0, 4), c);
  EXPECT_LT(max(abs(prompt - want)).item<float>(), 1e-6) << "the prompt";
  for (int64_t t = 4; t < 9; ++t) {
    Tensor step = select(m.forward(slice(ids, 1, t, t + 1), cache), 1, 0);  // (2, V)
    EXPECT_EQ(cache.length, t + 1);
    want = select(ref_forward(ref, ref.at("wte.weight"), slice(ids, 1, 0, t + 1), c), 1, t);
    EXPECT_LT(max(abs(step - want)).item<float>(), 1e-6) << "position " << t;
  }
}

TEST(GPT, SampleTokenFollowsTemperatureAndTopK) {
  Tensor logits = from_vector<float>({0.0f, 2.0f, 1.0f, -1.0f}, {4});
  EXPECT_EQ(sample_token(logits, 0.0, 0, 0.99), 1);  // greedy
  // top-k 2 keeps ids 1 and 2 with weights e^2 : e^1; u below e^2 / (e^2 + e) picks 1.
  double p1 = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  EXPECT_EQ(sample_token(logits, 1.0, 2, p1 - 1e-9), 1);
  EXPECT_EQ(sample_token(logits, 1.0, 2, p1 + 1e-9), 2);
  EXPECT_EQ(sample_token(logits, 1.0, 2, 0.999999), 2);  // never outside the top 2
}

TEST(GPT, BadConfigsAndInputsAreErrorsNamingTheValues) {
  auto msg = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      msg([] { GPT m(GPTConfig{.n_head = 5, .n_embd = 64}); }).find("not divisible by n_head 5"),
      std::string::npos);
  EXPECT_NE(msg([] { GPTConfig::gpt2("d13"); }).find("unknown depth \"d13\""), std::string::npos);
  GPT m(tiny(1, 32));
  EXPECT_NE(msg([&] {
              m.forward(random_ids(1, 17, 37, 1));
            }).find("17 positions exceed the context of 16"),
            std::string::npos);
  EXPECT_NE(msg([&] { m.forward(ones({2, 3})); }).find("int64 token ids"), std::string::npos);
  EXPECT_NE(msg([&] { generate(m, {40}, {.max_new_tokens = 2}); }).find("prompt token 40"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              generate(m, {1, 2}, {.max_new_tokens = 15});
            }).find("exceed the context of 16"),
            std::string::npos);
}
