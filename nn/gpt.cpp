// GPT-2 (nn/gpt.h): its sizes, its init, its embeddings and the parts it composes: the transformer
// stack (nn/transformer.h), the final norm and the tied head (the forwards: nn/decoder_lm.cpp).
// Leaves out: generation (nn/gpt_sample.cpp) and the training loop (examples/train_gpt.cpp).
#include "nn/gpt.h"

#include <cmath>

#include "autograd/ops/factory.h"
#include "autograd/ops/ops.h"
#include "nn/init.h"

namespace loom::nn {

// ---------------------------------------------------------------- config

GPTConfig GPTConfig::gpt2(const std::string& depth) {
  GPTConfig c;
  if (depth == "d12") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (depth == "d24") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (depth == "d36") {
    c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
  } else if (depth == "d48") {
    c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  } else {
    LOOM_FAIL("GPTConfig::gpt2: unknown depth \"", depth, "\" (d12, d24, d36 or d48)");
  }
  return c;
}

void GPTConfig::check() const {
  LOOM_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
             "GPTConfig: every size must be positive (vocab_size ", vocab_size, ", block_size ",
             block_size, ", n_layer ", n_layer, ", n_head ", n_head, ", n_embd ", n_embd, ")");
  LOOM_CHECK(n_embd % n_head == 0, "GPTConfig: n_embd ", n_embd, " is not divisible by n_head ",
             n_head);
  LOOM_CHECK(dropout >= 0.0 && dropout < 1.0, "GPTConfig: dropout ", dropout, " is not in [0, 1)");
}

// GPT-2's block is TransformerConfig's default: causal, pre-norm, LayerNorm (eps 1e-5), the
// tanh-GELU MLP of width 4 C.
TransformerConfig GPTConfig::block_config() const {
  return TransformerConfig{.n_embd = n_embd, .n_head = n_head, .bias = bias, .dropout = dropout};
}

// ---------------------------------------------------------------- GPT

GPT::GPT(GPTConfig cfg) : DecoderLM("GPT"), config(cfg) {
  config.check();
  const TransformerConfig block = cfg.block_config();
  wte = register_module("wte", make<Embedding>(cfg.vocab_size, cfg.n_embd));
  wpe = register_module("wpe", make<Embedding>(cfg.block_size, cfg.n_embd));
  drop = register_module("drop", make<Dropout>(cfg.dropout));
  h = register_module("h", make<TransformerStack>(block, cfg.n_layer));
  ln_f = register_module("ln_f", make_norm(block));
  lm_head = register_module("lm_head", make<Linear>(cfg.n_embd, cfg.vocab_size, false));
  lm_head->weight = wte->weight;  // Note [Tied embedding]: one tensor, listed under wte.weight
  init_weights();
}

void GPT::init_weights() {
  double proj_std = 0.02 / std::sqrt(2.0 * double(config.n_layer));
  for (const auto& [name, p] : named_parameters()) {
    bool is_proj = name.ends_with("c_proj.weight");
    if (name.ends_with(".bias"))
      init::zeros_(p);
    else if (name.starts_with("ln_") || name.find(".ln_") != std::string::npos)
      init::ones_(p);  // LayerNorm weights
    else
      init::normal_(p, 0.0, is_proj ? proj_std : 0.02);
  }
}

Tensor GPT::embed(const Tensor& idx, int64_t start) {
  check_positions(idx, start, "block_size");
  Tensor pos = arange(double(start), double(start + idx.size(1)), 1.0,
                      {.dtype = kI64, .device = idx.device()});
  return drop->forward(wte->forward(idx) + wpe->forward(pos));  // (B, T, C) + (T, C)
}

Tensor GPT::embed_static(const Tensor& idx, const StaticKVCache& cache) {
  check_positions(idx, cache.length, "block_size");
  return drop->forward(wte->forward(idx) + wpe->forward(cache.positions));  // (B, T, C) + (T, C)
}

int64_t GPT::num_parameters(bool include_position_table) const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return include_position_table ? n : n - wpe->weight.numel();
}

double GPT::flops_per_token(int64_t T) const {
  return decoder_flops_per_token(num_parameters(false), config.n_layer, config.n_head,
                                 config.n_embd / config.n_head, T);
}

}  // namespace loom::nn
