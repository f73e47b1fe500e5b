// The pre-norm transformer block of GPT-2, the Vision Transformer and (coming) Llama, written
// plainly: TransformerConfig says which norm, MLP and attention a block has; TransformerBlock's
// forward is x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); TransformerStack runs n of them, then
// the model's final norm. Leaves out: the fused forms nn::fuse swaps in (nn/fused_transformer.h),
// embeddings and heads (nn/gpt.h, nn/vit.h), post-norm (Note [Where post-norm would go]).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace loom::nn {

// Keys and values of every position seen so far, per layer: (B, H, length, D) each.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;  // positions held
};

// Note [Transformer extension points]
// A block is made of a norm, attention, a norm and an MLP. Each kind below has one value today;
// the next is named beside it, with the place it goes:
// - NormKind: make_norm builds the module. RMSNorm (Llama) needs an rms_norm op first
//   (docs/adding-an-op.md), then a case there; nn::fuse fuses LayerNorms only.
// - MLPKind: make_feed_forward builds the module. SwiGLU (Llama) is w2(silu(w1 x) * w3 x), three
//   Linears without biases, a class beside MLP.
// - n_kv_head: grouped-query attention (Llama 2/3) would make c_attn C -> C + 2 n_kv_head D and
//   repeat each key/value head n_head / n_kv_head times; until then it must equal n_head.
// - Positions: Absolute means the model adds a learned table to the tokens before the blocks
//   (GPT's wpe, ViT's pos_embed) and attention sees no positions. Rotary (Llama) would rotate q
//   and k by their positions inside SelfAttention::forward, before scaled_dot_product_attention.
enum class NormKind { LayerNorm };
enum class MLPKind { GELU };
enum class Positions { Absolute };

// One block's sizes and kinds. GPTConfig::block_config and ViTConfig::block_config make them.
struct TransformerConfig {
  int64_t n_embd = 768;   // C
  int64_t n_head = 12;    // H; each head has D = C / H channels
  int64_t n_kv_head = 0;  // key/value heads; 0 means n_head (Note [Transformer extension points])
  bool causal = true;     // false: every position attends to every position (ViT)
  bool bias = true;       // in the Linears and the norms
  double dropout = 0.0;   // on the attention weights and after each residual branch
  NormKind norm = NormKind::LayerNorm;
  double norm_eps = 1e-5;
  MLPKind mlp = MLPKind::GELU;
  std::string gelu_approximate = "tanh";  // as nn::GELU: "tanh" (GPT-2) or "none" (erf; ViT)
  int64_t mlp_hidden = 0;                 // the MLP's width; 0 means 4 C
  Positions positions = Positions::Absolute;

  int64_t hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * n_embd; }
  // Sizes positive, C divisible by H, n_kv_head 0 or n_head, dropout in [0, 1), eps positive;
  // errors name the field and its value.
  void check() const;
};

// The norm of cfg.norm over the last dim C: LayerNorm(C, eps, bias).
std::shared_ptr<Module> make_norm(const TransformerConfig& cfg);
// The MLP of cfg.mlp: (B, T, C) -> (B, T, C).
std::shared_ptr<Module> make_feed_forward(const TransformerConfig& cfg);

// x: (B, T, C) -> (B, T, C). One Linear makes q, k and v for all heads at once (c_attn, C -> 3C);
// the heads are views of its output (B, T, 3, H, D), never copies. Printed as
// CausalSelfAttention when causal (GPT), SelfAttention otherwise (ViT: no mask).
class SelfAttention : public Module {
 public:
  explicit SelfAttention(const TransformerConfig& cfg);
  Tensor forward(const Tensor& x) override;
  // With a cache: x holds the positions after the cached ones; its k and v are appended to
  // layer `layer` of the cache. Either the cache is empty (a prompt: causal) or x is one position
  // (it attends to everything cached). Causal attention only.
  Tensor forward(const Tensor& x, KVCache& cache, size_t layer);

  int64_t n_head, n_embd;
  double dropout;
  bool causal;
  ModuleHolder<Linear> c_attn, c_proj;
  ModuleHolder<Dropout> resid_dropout;

 private:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
};

// x: (B, T, C) -> (B, T, C): dropout(c_proj(gelu(c_fc(x)))), c_fc C -> hidden, c_proj back.
class MLP : public Module {
 public:
  explicit MLP(const TransformerConfig& cfg);
  Tensor forward(const Tensor& x) override;

  ModuleHolder<Linear> c_fc, c_proj;
  ModuleHolder<GELU> gelu;
  ModuleHolder<Dropout> dropout;
};

// Note [Where post-norm would go]
// BERT and the original Transformer normalise after each residual add:
// x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)), and the model has no final norm. That is a second
// pair of lines in TransformerBlock::forward under a TransformerConfig switch (norm_first, as
// torch.nn.TransformerEncoderLayer calls it); the models pass an Identity as the final norm.
// FusedTransformerBlock would then fuse each add into the norm right after it within the block
// (the same add_layer_norm) and hand nothing to the next block.

// Pre-norm: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). (B, T, C) -> (B, T, C).
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerConfig& cfg);
  Tensor forward(const Tensor& x) override;
  // The same, attention with a KV cache (SelfAttention::forward with a cache).
  virtual Tensor forward(const Tensor& x, KVCache& cache, size_t layer);

  ModuleHolder<Module> ln_1;  // make_norm
  ModuleHolder<SelfAttention> attn;
  ModuleHolder<Module> ln_2;
  ModuleHolder<Module> mlp;  // make_feed_forward

 protected:
  // A block of these children, registered under the plain block's names and in its order (the
  // fused block's: nn/fused_transformer.h).
  TransformerBlock(std::string type_name, std::shared_ptr<Module> ln_1,
                   std::shared_ptr<SelfAttention> attn, std::shared_ptr<Module> ln_2,
                   std::shared_ptr<Module> mlp);
};

// n blocks, children "0", "1", ... (a Sequential of TransformerBlocks), and the model's final
// norm after them. With `checkpointing`, training forwards keep only each block's input and
// recompute the block in backward (Note [Activation checkpointing] in autograd/checkpoint.h).
class TransformerStack : public Sequential {
 public:
  TransformerStack(const TransformerConfig& cfg, int64_t n_layer);
  // x: (B, T, C) -> block_{n-1}(... block_0(x)): (B, T, C).
  Tensor forward(const Tensor& x) override;
  // final_norm(forward(x)): what a model's trunk runs (GPT's ln_f, ViT's norm).
  virtual Tensor forward(const Tensor& x, Module& final_norm);
  // The same with a KV cache (layer i is block i), never checkpointed.
  virtual Tensor forward(const Tensor& x, Module& final_norm, KVCache& cache);
  std::shared_ptr<TransformerBlock> block(size_t i) const { return at<TransformerBlock>(i); }

  bool checkpointing = false;

 protected:
  explicit TransformerStack(std::string type_name) : Sequential(std::move(type_name)) {}
};

}  // namespace loom::nn
