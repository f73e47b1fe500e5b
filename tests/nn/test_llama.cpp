// nn::Llama (nn/llama.h) and the block kinds it is made of (nn/transformer.h: RMSNorm, SwiGLU,
// grouped key/value heads, rotary positions): the presets' published parameter counts without
// allocating them, the constructor's shapes against the config's list, one block against a
// float64 composite of primitive ops (values and gradients), the KV cache against the full
// forward, the fused loss, checkpointing, and generation's top-p and stop tokens.
// Leaves out: parity with transformers (tests/nn/test_hf_llama.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "autograd/ops/rope.h"
#include "nn/fuse.h"
#include "nn/gpt_sample.h"
#include "nn/llama.h"

using namespace loom;
using namespace loom::nn;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  manual_seed(seed);
  return randint(0, V, {B, T}, {.dtype = kI64});
}

// A block with every Llama kind, small enough for float64 composites: C 16, 4 heads of 4, 2
// key/value heads, F 24, Llama 3 scaled rotary positions.
TransformerConfig llama_block() {
  return LlamaConfig{
      .dim = 16,
      .n_layers = 1,
      .n_heads = 4,
      .n_kv_heads = 2,
      .ffn_hidden = 24,
      .vocab_size = 10,
      .norm_eps = 1e-5,
      .rope_theta = 10000.0,
      .rope_llama3 = RopeLlama3Scaling{.factor = 8.0, .original_max_position_embeddings = 4},
      .tie_embeddings = false,
      .max_seq_len = 64}
      .block_config();
}

// --- the float64 oracle, written with primitive ops only

Tensor rms(const Tensor& x, const Tensor& w, double eps) {  // (..., C)
  return x * rsqrt(mean(x * x, {-1}, true) + eps) * w;
}

// x: (B, H, T, D) rotated at positions 0..T-1: x cos + rotate_half(x) sin, the angles from
// rope_inv_freq (the frequencies are rope's own; transformers' parity covers them).
Tensor rotate(const Tensor& x, const RopeConfig& cfg) {
  const int64_t T = x.size(2), D = x.size(3), half = D / 2;
  std::vector<double> inv = rope_inv_freq(cfg, D), c, s;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) {
      c.push_back(std::cos(double(t) * inv[size_t(i % half)]));
      s.push_back(std::sin(double(t) * inv[size_t(i % half)]));
    }
  Tensor cos_t = from_vector(c, {T, D}), sin_t = from_vector(s, {T, D});
  Tensor rot = cat({neg(slice(x, 3, half, D)), slice(x, 3, 0, half)}, 3);
  return x * cos_t + rot * sin_t;
}

// One Llama block: x + o(attn(rope(q), rope(k), v)), then + down(silu(gate) * up).
Tensor block_composite(TransformerBlock& b, const TransformerConfig& cfg, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = cfg.n_embd, H = cfg.n_head, Hkv = cfg.kv_heads(),
                D = C / H, F = cfg.hidden();
  auto& ln1 = dynamic_cast<RMSNorm&>(*b.ln_1);
  auto& ln2 = dynamic_cast<RMSNorm&>(*b.ln_2);
  auto& mlp = dynamic_cast<SwiGLUMLP&>(*b.mlp);
  Tensor w = b.attn->c_attn->weight;  // (C + 2 Hkv D, C)
  Tensor h = rms(x, ln1.weight, cfg.norm_eps);
  auto proj = [&](int64_t r0, int64_t n, int64_t heads) {  // -> (B, heads, T, D)
    Tensor y = matmul(h, transpose(slice(w, 0, r0, r0 + n), 0, 1));
    return permute(reshape(y, {B, T, heads, D}), {0, 2, 1, 3});
  };
  Tensor q = rotate(proj(0, C, H), cfg.rope), k = rotate(proj(C, Hkv * D, Hkv), cfg.rope);
  Tensor v = proj(C + Hkv * D, Hkv * D, Hkv);
  std::vector<Tensor> ks, vs;  // key/value head j serves query heads j * H / Hkv, ...
  for (int64_t i = 0; i < H; ++i) {
    ks.push_back(slice(k, 1, i / (H / Hkv), i / (H / Hkv) + 1));
    vs.push_back(slice(v, 1, i / (H / Hkv), i / (H / Hkv) + 1));
  }
  Tensor att = matmul(q, transpose(cat(ks, 1), 2, 3)) / std::sqrt(double(D));  // (B, H, T, T)
  std::vector<double> mask;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask.push_back(j <= i ? 0.0 : -1e30);
  att = softmax(att + from_vector(mask, {T, T}), -1);
  Tensor y = reshape(permute(matmul(att, cat(vs, 1)), {0, 2, 1, 3}), {B, T, C});
  Tensor r = x + matmul(y, transpose(b.attn->c_proj->weight, 0, 1));
  Tensor g = matmul(rms(r, ln2.weight, cfg.norm_eps), transpose(mlp.c_fc->weight, 0, 1));
  Tensor act = silu(slice(g, 2, 0, F)) * slice(g, 2, F, 2 * F);
  return r + matmul(act, transpose(mlp.c_proj->weight, 0, 1));
}

}  // namespace

TEST(LlamaConfig, PresetsHaveThePublishedParameterCounts) {
  // Counted from the shapes, nothing allocated (8B parameters would be 32 GB in float32).
  EXPECT_EQ(LlamaConfig::preset("llama3.2-1b").num_parameters(), 1235814400);
  EXPECT_EQ(LlamaConfig::preset("llama3.2-3b").num_parameters(), 3212749824);
  EXPECT_EQ(LlamaConfig::preset("llama3-8b").num_parameters(), 8030261248);
  EXPECT_THROW(LlamaConfig::preset("llama2-7b"), Error);
}

TEST(LlamaConfig, ParameterShapesAreTheConstructors) {
  for (bool tied : {false, true}) {
    LlamaConfig c = LlamaConfig::preset("tiny");
    c.tie_embeddings = tied;
    Llama m(c);
    auto want = c.parameter_shapes();
    auto got = m.named_parameters();
    ASSERT_EQ(got.size(), want.size()) << "tied " << tied;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_EQ(got[i].second.shape(), want[i].second) << want[i].first;
    }
    EXPECT_EQ(m.num_parameters(), c.num_parameters());
    EXPECT_EQ(tied, m.lm_head->weight.impl() == m.embed_tokens->weight.impl());
  }
}

TEST(LlamaBlock, MatchesAFloat64CompositeValuesAndGradients) {
  const TransformerConfig cfg = llama_block();
  manual_seed(3);
  TransformerBlock b(cfg);
  b.to(kF64);
  for (auto& p : b.parameters()) {
    NoGradGuard g;
    p.copy_(randn(p.shape(), {.dtype = kF64}) * 0.3 + (p.dim() == 1 ? 1.0 : 0.0));
  }
  Tensor x = randn({2, 7, 16}, {.dtype = kF64}).requires_grad_(true);
  Tensor y = b(x), want = block_composite(b, cfg, x);
  EXPECT_LT(max_abs_diff(y, want), 1e-12);
  Tensor dy = randn(y.shape(), {.dtype = kF64});
  std::vector<Tensor> inputs{x};
  for (auto& p : b.parameters()) inputs.push_back(p);
  auto grads = [&](const Tensor& out) {
    for (auto& t : inputs) t.set_grad(Tensor());
    out.backward(dy);
    std::vector<Tensor> g;
    for (auto& t : inputs) g.push_back(t.grad());
    return g;
  };
  auto g1 = grads(y), g2 = grads(want);
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_LT(max_abs_diff(g1[i], g2[i]), 1e-11) << i;
}

TEST(Llama, KVCacheDecodeEqualsTheFullForward) {
  manual_seed(5);
  Llama m(LlamaConfig::preset("tiny"));
  m.to(kF64);
  m.eval();
  Tensor ids = random_ids(2, 9, 96, 6);
  NoGradGuard g;
  Tensor full = m.forward(ids);
  KVCache cache;
  std::vector<Tensor> steps{m.forward(slice(ids, 1, 0, 4), cache)};  // a prompt of 4, then 1 by 1
  for (int64_t t = 4; t < 9; ++t) steps.push_back(m.forward(slice(ids, 1, t, t + 1), cache));
  EXPECT_EQ(cache.length, 9);
  EXPECT_EQ(cache.k[0].shape(), Shape({2, 2, 9, 16}));  // n_kv_heads heads, not n_heads
  EXPECT_LT(max_abs_diff(cat(steps, 1), full), 1e-12);
}

TEST(Llama, LossIsCrossEntropyOfTheLogitsAndCheckpointingKeepsGradients) {
  manual_seed(7);
  Llama m(LlamaConfig::preset("tiny"));
  m.to(kF64);
  Tensor ids = random_ids(2, 8, 96, 8), targets = random_ids(2, 8, 96, 9);
  Tensor want = cross_entropy(reshape(m.forward(ids), {16, 96}), reshape(targets, {16}));
  Tensor loss = m.loss(ids, targets);
  EXPECT_NEAR(loss.item(), want.item(), 1e-12);
  loss.backward();
  std::vector<Tensor> plain;
  for (auto& p : m.parameters()) plain.push_back(p.grad().clone()), p.set_grad(Tensor());
  m.set_activation_checkpointing(true);
  m.loss(ids, targets).backward();
  auto params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_LT(max_abs_diff(params[i].grad(), plain[i]), 1e-12);
  EXPECT_GT(m.flops_per_token(8), 6.0 * double(m.num_parameters() - 96 * 64));
}

TEST(Generate, TopPKeepsTheNucleus) {
  Tensor logits =
      from_vector(std::vector<double>{std::log(0.5), std::log(0.3), std::log(0.2)}, {3});
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(sample_token(logits, 1.0, 0, u, 0.5), 0) << u;
  EXPECT_EQ(sample_token(logits, 1.0, 0, 0.99, 0.7), 1);  // {0, 1}: 0.8 of the mass
  EXPECT_EQ(sample_token(logits, 1.0, 0, 0.99, 0.9), 2);  // all three
  EXPECT_EQ(sample_token(logits, 1.0, 0, 0.99, 1.0), 2);
  EXPECT_THROW(sample_token(logits, 1.0, 0, 0.5, 0.0), Error);
}

TEST(Generate, StopsAfterAStopTokenForLlamaAndGPT) {
  manual_seed(11);
  Llama llama(LlamaConfig::preset("tiny"));
  GPT gpt(GPTConfig{.vocab_size = 96, .block_size = 64, .n_layer = 1, .n_head = 2, .n_embd = 16});
  for (CausalLM* m : std::vector<CausalLM*>{&llama, &gpt}) {
    SampleOptions o{.max_new_tokens = 12, .temperature = 0.0};
    auto all = generate(*m, {1, 2, 3}, o);
    ASSERT_EQ(all.size(), 12u) << m->type_name();
    o.stop_tokens = {all[4]};
    auto stopped = generate(*m, {1, 2, 3}, o);
    auto first = std::find(all.begin(), all.end(), all[4]) - all.begin();
    EXPECT_EQ(stopped, std::vector<int64_t>(all.begin(), all.begin() + first + 1))
        << m->type_name();
  }
}

// nn::fuse knows GPT's and ViT's trunks only: a Llama (RMSNorm, SwiGLU) stays plain and computes
// the same.
TEST(Llama, FuseLeavesItPlain) {
  manual_seed(13);
  Llama m(LlamaConfig::preset("tiny"));
  m.eval();
  Tensor ids = random_ids(1, 5, 96, 14);
  NoGradGuard g;
  Tensor before = m.forward(ids);
  EXPECT_TRUE(fuse(m).empty());
  EXPECT_EQ(m.layers->block(0)->type_name(), "TransformerBlock");
  EXPECT_EQ(m.forward(ids).to_vector<double>(), before.to_vector<double>());
  std::ostringstream printed;
  printed << m;
  EXPECT_NE(printed.str().find("SwiGLUMLP"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("RMSNorm(64, eps=1e-05)"), std::string::npos) << printed.str();
}
