// Llama (nn/llama.h): its presets and checks, its parameter shapes counted without allocating,
// and the parts it composes: the embedding, the transformer stack (nn/transformer.h), the final
// RMSNorm and the head (the forwards: nn/decoder_lm.cpp).
// Leaves out: Hugging Face folders (nn/hf_llama.cpp) and generation (nn/gpt_sample.cpp).
#include "nn/llama.h"

#include "autograd/ops/ops.h"
#include "nn/init.h"

namespace loom::nn {

// ---------------------------------------------------------------- config

namespace {
// Llama 3.2's rope_scaling (config.json of meta-llama/Llama-3.2-1B and -3B).
RopeLlama3Scaling llama32_scaling() {
  return RopeLlama3Scaling{.factor = 32.0,
                           .low_freq_factor = 1.0,
                           .high_freq_factor = 4.0,
                           .original_max_position_embeddings = 8192};
}
}  // namespace

LlamaConfig LlamaConfig::preset(const std::string& name) {
  LlamaConfig c;  // the defaults are Llama 3.2 1B's
  c.rope_llama3 = llama32_scaling();
  if (name == "llama3.2-1b") {
  } else if (name == "llama3.2-3b") {
    c.dim = 3072, c.n_layers = 28, c.n_heads = 24;
  } else if (name == "llama3-8b") {  // Llama 3 (not 3.1): no rope scaling, 8k context
    c.dim = 4096, c.n_layers = 32, c.ffn_hidden = 14336, c.tie_embeddings = false;
    c.rope_llama3.reset();
    c.max_seq_len = 8192;
  } else if (name == "tiny") {  // tests/nn/golden/hf/llama's sizes
    c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_hidden = 128;
    c.vocab_size = 96, c.tie_embeddings = false, c.max_seq_len = 128;
    c.rope_llama3 = RopeLlama3Scaling{.factor = 8.0, .original_max_position_embeddings = 32};
  } else {
    LOOM_FAIL("LlamaConfig::preset: unknown name \"", name,
              "\" (llama3.2-1b, llama3.2-3b, llama3-8b or tiny)");
  }
  return c;
}

void LlamaConfig::check() const {
  LOOM_CHECK(dim > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && ffn_hidden > 0 &&
                 vocab_size > 0 && max_seq_len > 0,
             "LlamaConfig: every size must be positive (dim ", dim, ", n_layers ", n_layers,
             ", n_heads ", n_heads, ", n_kv_heads ", n_kv_heads, ", ffn_hidden ", ffn_hidden,
             ", vocab_size ", vocab_size, ", max_seq_len ", max_seq_len, ")");
  LOOM_CHECK(dim % n_heads == 0 && (dim / n_heads) % 2 == 0, "LlamaConfig: dim ", dim,
             " must split into n_heads ", n_heads, " heads of an even size");
  LOOM_CHECK(n_heads % n_kv_heads == 0, "LlamaConfig: n_kv_heads ", n_kv_heads,
             " does not divide n_heads ", n_heads);
  LOOM_CHECK(norm_eps > 0.0, "LlamaConfig: norm_eps ", norm_eps, " must be positive");
  LOOM_CHECK(rope_theta > 0.0, "LlamaConfig: rope_theta ", rope_theta, " must be positive");
}

RopeConfig LlamaConfig::rope() const {
  return RopeConfig{
      .theta = rope_theta, .max_position_embeddings = max_seq_len, .llama3 = rope_llama3};
}

// Where Llama's block differs from GPT-2's (TransformerConfig's default: causal, pre-norm, no
// dropout): grouped-query attention, no biases, RMSNorm, the SwiGLU MLP, rotary positions.
TransformerConfig LlamaConfig::block_config() const {
  TransformerConfig block{.n_embd = dim,
                          .n_head = n_heads,
                          .n_kv_head = n_kv_heads,
                          .bias = false,
                          .norm = NormKind::RMSNorm,
                          .norm_eps = norm_eps,
                          .mlp = MLPKind::SwiGLU,
                          .mlp_hidden = ffn_hidden,
                          .positions = Positions::Rotary,
                          .rope = rope()};
  block.qkv_bias = qkv_bias;  // Qwen2's biases on q, k and v (Note [Qwen2 as Llama])
  return block;
}

// The shapes the constructor registers, in its order (tests/nn/test_llama.cpp checks that the
// two agree on a small config).
std::vector<std::pair<std::string, Shape>> LlamaConfig::parameter_shapes() const {
  const int64_t C = dim, kv = n_kv_heads * (dim / n_heads), F = ffn_hidden;
  std::vector<std::pair<std::string, Shape>> out{{"embed_tokens.weight", {vocab_size, C}}};
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    out.push_back({l + "ln_1.weight", {C}});
    out.push_back({l + "attn.c_attn.weight", {C + 2 * kv, C}});
    if (qkv_bias) out.push_back({l + "attn.c_attn.bias", {C + 2 * kv}});
    out.push_back({l + "attn.c_proj.weight", {C, C}});
    out.push_back({l + "ln_2.weight", {C}});
    out.push_back({l + "mlp.c_fc.weight", {2 * F, C}});
    out.push_back({l + "mlp.c_proj.weight", {C, F}});
  }
  out.push_back({"norm.weight", {C}});
  if (!tie_embeddings) out.push_back({"lm_head.weight", {vocab_size, C}});
  return out;
}

int64_t LlamaConfig::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes()) n += loom::numel(shape);
  return n;
}

// ---------------------------------------------------------------- Llama

Llama::Llama(LlamaConfig cfg) : DecoderLM("Llama"), config(std::move(cfg)) {
  config.check();
  const TransformerConfig block = config.block_config();
  embed_tokens = register_module("embed_tokens", make<Embedding>(config.vocab_size, config.dim));
  layers = register_module("layers", make<TransformerStack>(block, config.n_layers));
  norm = register_module("norm", make_norm(block));
  lm_head = register_module("lm_head", make<Linear>(config.dim, config.vocab_size, false));
  if (config.tie_embeddings) lm_head->weight = embed_tokens->weight;  // listed once
  init_weights();
}

void Llama::init_weights() {
  for (const auto& [name, p] : named_parameters()) {
    if (name.ends_with(".bias"))
      init::zeros_(p);  // q, k and v's (qkv_bias)
    else if (p.dim() == 1)
      init::ones_(p);  // the RMSNorms' weights
    else
      init::normal_(p, 0.0, 0.02);
  }
}

Tensor Llama::embed(const Tensor& idx, int64_t start) {
  check_positions(idx, start, "max_seq_len");
  return embed_tokens->forward(idx);  // (B, T, C); positions are rotary, inside attention
}

// The rotary angles at the cache's device positions are the attention's (Note [Static KV cache]).
Tensor Llama::embed_static(const Tensor& idx, const StaticKVCache& cache) {
  return embed(idx, cache.length);
}

int64_t Llama::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

double Llama::flops_per_token(int64_t T) const {
  const bool untied = !config.tie_embeddings;
  return decoder_flops_per_token(num_parameters() - (untied ? embed_tokens->weight.numel() : 0),
                                 config.n_layers, config.n_heads, config.dim / config.n_heads, T);
}

}  // namespace loom::nn
