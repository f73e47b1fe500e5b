// Llama (Touvron et al., 2023; Llama 3, Grattafiori et al., 2024) as Hugging Face's
// LlamaForCausalLM computes it: a token embedding, n_layers pre-norm transformer blocks
// (nn/transformer.h: RMSNorm, causal self-attention with grouped key/value heads and rotary
// positions, residual add; RMSNorm, the SwiGLU MLP, residual add), a final RMSNorm and the output
// head, tied to the embedding or not. No biases (but q, k and v's with qkv_bias, as Qwen2 has),
// no dropout, no position table. Parameter names:
// embed_tokens.weight, layers.0.ln_1.weight, layers.0.attn.c_attn.weight (q, k, v packed),
// layers.0.attn.c_proj.weight, layers.0.ln_2.weight, layers.0.mlp.c_fc.weight (gate, up packed),
// layers.0.mlp.c_proj.weight, ..., norm.weight, lm_head.weight (untied); the Hugging Face names
// are nn/hf_llama.h's. Leaves out: loading folders (nn/hf_llama.h), generation (nn/gpt_sample.h),
// fused blocks (nn::fuse leaves a Llama plain), rope scalings other than Llama 3's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/decoder_lm.h"
#include "nn/layers.h"
#include "nn/transformer.h"

namespace loom::nn {

struct LlamaConfig {
  int64_t dim = 2048;         // C (hidden_size)
  int64_t n_layers = 16;      // num_hidden_layers
  int64_t n_heads = 32;       // H; each head has D = dim / n_heads channels
  int64_t n_kv_heads = 8;     // key/value heads, dividing n_heads (num_key_value_heads)
  int64_t ffn_hidden = 8192;  // F (intermediate_size)
  int64_t vocab_size = 128256;
  double norm_eps = 1e-5;  // rms_norm_eps
  double rope_theta = 500000.0;
  std::optional<RopeLlama3Scaling> rope_llama3 =
      std::nullopt;              // rope_scaling {"rope_type": "llama3", ...}
  bool tie_embeddings = true;    // lm_head.weight IS embed_tokens.weight (Note [Tied embedding])
  int64_t max_seq_len = 131072;  // max_position_embeddings
  bool qkv_bias = false;  // biases on q, k and v (Qwen2: Note [Qwen2 as Llama] in nn/hf_llama.h)

  // The released sizes: "llama3.2-1b" (1,235,814,400 parameters), "llama3.2-3b" (3,212,749,824),
  // "llama3-8b" (8,030,261,248); and "tiny" (2 layers, dim 64, 4 heads, 2 key/value heads, F 128,
  // vocab 96: the Hugging Face fixture's sizes) for tests. An unknown name is an error listing
  // these.
  static LlamaConfig preset(const std::string& name);
  // Sizes positive, n_heads dividing dim, n_kv_heads dividing n_heads, an even head size, eps and
  // theta positive; errors name the field and its value.
  void check() const;
  // The blocks': causal, RMSNorm, SwiGLU, grouped key/value heads, rotary positions, no biases.
  TransformerConfig block_config() const;
  RopeConfig rope() const;
  // Every parameter's name and shape, as Llama(config) registers them (the tied head once, under
  // embed_tokens.weight), computed without allocating: the test builds each preset's list.
  std::vector<std::pair<std::string, Shape>> parameter_shapes() const;
  int64_t num_parameters() const;  // the sum of parameter_shapes()
};

class Llama : public DecoderLM {
 public:
  explicit Llama(LlamaConfig cfg);
  // DecoderLM's forwards (T <= max_seq_len; the rotary offset from a cache's length), loss and
  // hidden.
  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t max_context() const override { return config.max_seq_len; }
  Device device() const override { return embed_tokens->weight.device(); }

  // Every Linear and the embedding ~ N(0, 0.02) (transformers' initializer_range), norms 1,
  // biases 0.
  void init_weights();
  int64_t num_parameters() const;  // counted once (a tied matrix once)
  // Training FLOPs per token at context T, as GPT's (PaLM's 6 N + 12 L H D T), N without the
  // embedding lookup (an untied embed_tokens does no multiply; a tied one is the head).
  double flops_per_token(int64_t T) const;
  // Activation checkpointing per block (TransformerStack::checkpointing).
  void set_activation_checkpointing(bool on) { layers->checkpointing = on; }
  bool activation_checkpointing() const { return layers->checkpointing; }

  LlamaConfig config;
  ModuleHolder<Embedding> embed_tokens;
  ModuleHolder<TransformerStack> layers;  // n_layers TransformerBlocks: layers.0, layers.1, ...
  ModuleHolder<Module> norm;              // make_norm: an RMSNorm
  ModuleHolder<Linear> lm_head;           // no bias; its weight is embed_tokens' when tied

  // The token embedding: (B, T) ids -> (B, T, C), checking positions [start, start + T) fit the
  // context (what a pipeline's first stage runs before its blocks).
  Tensor embed(const Tensor& idx, int64_t start) override;

 protected:
  Tensor embed_static(const Tensor& idx, const StaticKVCache& cache) override;
  TransformerStack& stack() override { return *layers; }
  Module& final_norm() override { return *norm; }
  Linear& head() override { return *lm_head; }
};

}  // namespace loom::nn
