// The transformer block of GPT-2, the Vision Transformer, Llama and BERT, written plainly:
// TransformerConfig says which norm, MLP and attention a block has; TransformerBlock's forward is
// pre-norm, x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)), or post-norm (BERT: Note [Post-norm]);
// TransformerStack runs n of them, then the model's final norm. Attention may take per-batch key
// lengths (a padding mask). Leaves out: the fused forms nn::fuse swaps in
// (nn/fused_transformer.h), embeddings and heads (nn/gpt.h, nn/vit.h, nn/bert.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops/rope.h"
#include "nn/layers.h"

namespace loom::nn {

// Keys and values of every position seen so far, per layer: (B, H_kv, length, D) each (H_kv the
// key/value heads: n_head without grouped-query attention). Grows by concatenation each step: the
// plain cache, and StaticKVCache's oracle.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;  // positions held
};

// Note [Static KV cache]
// KVCache concatenates each step's keys and values onto the cache, so every decode step has new
// shapes and new allocations, and a CUDA graph (which replays fixed kernels on fixed addresses)
// cannot hold it. StaticKVCache allocates, per layer, k and v buffers of (B, H_kv, max_len, D)
// once (zeros, by the first forward, in the dtype and on the device of that layer's keys), and
// keeps the position of the next input on the device: `position` (1) int64. A causal LM's forward
// with it (CausalLM::forward(idx, StaticKVCache&)) calls begin(B, T, device), which checks on the
// host that length + T <= max_len and computes from `position`, on the device:
//   positions (T) = position + [0, T): GPT's wpe rows, Llama's rotary angles (loom::rope with a
//     positions tensor), never a host int, so each step's kernels take the same arguments;
//   key_lengths (B) = position + 1: the keys a one-token step attends to.
// Then each layer's attention (SelfAttention::forward with the cache):
// - a prompt (length 0, any T): causal attention over the prompt's own keys, as KVCache's; they
//   are copied into slots [0, T) (an eager step: the slice is a host int, never captured);
// - one token (length >= 1): k_new written into slot `position` of the buffer by index_copy_
//   (the index read on the device: one slot's bytes, the buffer keeps its address), v the same,
//   and attention over all max_len slots with key_lengths (Note [Key
//   lengths] in autograd/ops/attention.cpp): slots >= position + 1 get weight exactly 0. Their
//   contents (zeros, or a previous sequence's keys) are finite, so they add exact zeros.
// Last the forward calls advance(T): position += T on the device, length += T on the host.
// So every one-token step runs the same kernels on the same addresses, whatever its position: the
// step nn::GraphDecoder captures (nn/graph_decode.h). In float64 on the CPU the logits are
// KVCache's (held to 1e-12; measured bit for bit: the masked keys add exact zeros):
// tests/nn/test_transformer_static_cache.cpp.
// Cost left: attention reads every max_len slot (in bf16 or f16 on CUDA cuDNN's fused attention
// with the lengths as its padding mask, grouped heads read in place; elsewhere the composite). The
// slot write was a where() over the whole buffer until index_copy_ (2026-12-05).
// Inference only: the forward refuses to run with gradients enabled.
struct StaticKVCache {
  explicit StaticKVCache(int64_t max_len = 0) : max_len(max_len) {}

  // Before a forward of (B, T) tokens on `device`: the checks (length + T <= max_len, an error
  // naming the three numbers; one token unless length is 0; no gradients), then positions, and
  // for one token key_lengths.
  void begin(int64_t B, int64_t T, Device device);
  // After it: position += T (on the device: a captured step advances it at each replay) and
  // length += T.
  void advance(int64_t T);
  // A new sequence: length and position 0 (the buffers keep their values; they are masked).
  void reset();

  int64_t max_len = 0;       // positions each buffer holds
  std::vector<Tensor> k, v;  // per layer: (B, H_kv, max_len, D); allocated by the first forward
  Tensor position;           // (1) int64 on the model's device: the next input's first position
  int64_t length = 0;        // positions written: position's value, as the host counts it
  // Set by begin for the forward that follows (Note [Static KV cache]).
  Tensor positions;    // (T) int64
  Tensor key_lengths;  // (B) int64, one-token forwards only
};

// Note [Transformer extension points]
// A block is made of a norm, attention, a norm and an MLP. The kinds, and where each goes:
// - NormKind: make_norm builds the module: LayerNorm (GPT-2, ViT) or RMSNorm (Llama: weight only,
//   loom::rms_norm). nn::fuse fuses LayerNorms only; a block with RMSNorms stays plain.
// - MLPKind: make_feed_forward builds the module: MLP (GELU) or SwiGLUMLP (Llama:
//   c_proj(swiglu(gate, up)), gate and up from one packed Linear C -> 2F; Note [Packed SwiGLU]).
// - n_kv_head: grouped-query attention (Llama 2/3). c_attn makes C + 2 n_kv_head D channels (q,
//   then k, then v); k and v keep n_kv_head heads and go to scaled_dot_product_attention as they
//   are (it shares each key/value head among n_head / n_kv_head query heads); a KV cache holds
//   n_kv_head heads.
// - Positions: Absolute means the model adds a learned table to the tokens before the blocks
//   (GPT's wpe, ViT's pos_embed) and attention sees no positions. Rotary (Llama) rotates q and k
//   by their positions inside SelfAttention (loom::rope with `rope`, offset by the KV cache's
//   length), before scaled_dot_product_attention.
// - norm_first: pre-norm (true: GPT-2, ViT, Llama) or post-norm (false: BERT, Note [Post-norm]).
// - Key lengths: a padding mask for right-padded batches (BERT), passed to forward; attention
//   then runs scaled_dot_product_attention with key_lengths (Note [Key lengths] in
//   autograd/ops/attention.cpp).
// With the first value of each (GPT-2, ViT) attention runs the packed op
// (scaled_dot_product_attention_packed), as before these kinds existed.
enum class NormKind { LayerNorm, RMSNorm };
enum class MLPKind { GELU, SwiGLU };
enum class Positions { Absolute, Rotary };

// One block's sizes and kinds. The defaults are GPT-2's block; GPTConfig::block_config,
// ViTConfig's, BertConfig's and LlamaConfig's make them, each setting what differs.
struct TransformerConfig {
  int64_t n_embd = 768;    // C
  int64_t n_head = 12;     // H; each head has D = C / H channels
  int64_t n_kv_head = 0;   // key/value heads dividing n_head; 0 means n_head (grouped-query)
  bool causal = true;      // false: every position attends to every position (ViT)
  bool norm_first = true;  // pre-norm; false: post-norm (BERT, Note [Post-norm])
  bool bias = true;        // in the Linears and the norms
  bool qkv_bias = false;   // c_attn's bias even without `bias` (Qwen2's q, k and v projections)
  double dropout = 0.0;    // on the attention weights and after each residual branch
  NormKind norm = NormKind::LayerNorm;
  double norm_eps = 1e-5;
  MLPKind mlp = MLPKind::GELU;
  std::string gelu_approximate = "tanh";  // as nn::GELU: "tanh" (GPT-2) or "none" (erf; ViT)
  int64_t mlp_hidden = 0;                 // the MLP's width; 0 means 4 C
  Positions positions = Positions::Absolute;
  RopeConfig rope = {};  // Positions::Rotary's frequencies (theta, Llama 3 scaling)

  int64_t hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * n_embd; }
  int64_t head_dim() const { return n_embd / n_head; }  // D
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Sizes positive, C divisible by H, n_kv_head 0 or a divisor of n_head, an even D for rotary
  // positions, dropout in [0, 1), eps positive; errors name the field and its value.
  void check() const;
};

// The norm of cfg.norm over the last dim C: LayerNorm(C, eps, bias) or RMSNorm(C, eps).
std::shared_ptr<Module> make_norm(const TransformerConfig& cfg);
// The MLP of cfg.mlp: (B, T, C) -> (B, T, C).
std::shared_ptr<Module> make_feed_forward(const TransformerConfig& cfg);

// x: (B, T, C) -> (B, T, C). One Linear makes q, k and v for all heads at once (c_attn,
// C -> C + 2 H_kv D: 3C without grouped-query attention); the heads are views of its output,
// never copies. With rotary positions q and k are rotated before attention. Printed as
// CausalSelfAttention when causal (GPT, Llama), SelfAttention otherwise (ViT: no mask).
class SelfAttention : public Module {
 public:
  explicit SelfAttention(const TransformerConfig& cfg);
  Tensor forward(const Tensor& x) override;
  // With a padding mask: key_lengths (B) int32/int64, keys t >= key_lengths[b] are padding for
  // every query of row b (an undefined tensor: none, the forward above).
  Tensor forward(const Tensor& x, const Tensor& key_lengths);
  // With a cache: x holds the positions after the cached ones; its k and v are appended to
  // layer `layer` of the cache. Either the cache is empty (a prompt: causal) or x is one position
  // (it attends to everything cached). Causal attention only.
  Tensor forward(const Tensor& x, KVCache& cache, size_t layer);
  // With a static cache (Note [Static KV cache]), after cache.begin: a prompt into an empty
  // cache, or one position at cache.position.
  Tensor forward(const Tensor& x, StaticKVCache& cache, size_t layer);

  // n_embd is the width of the input and output (C); the heads are n_head query and n_kv_head
  // key/value heads of head_dim channels. n_head * head_dim is C, unless tensor parallelism left
  // this rank a share of the heads (distributed/tensor_parallel/tensor_parallel.h).
  int64_t n_head, n_kv_head, n_embd, head_dim;
  double dropout;
  bool causal;
  Positions positions;
  RopeConfig rope;
  ModuleHolder<Linear> c_attn, c_proj;
  ModuleHolder<Dropout> resid_dropout;

 private:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                const Tensor& key_lengths = Tensor());
  // c_attn(x) -> q (B, H, T, D), k and v (B, H_kv, T, D), q and k rotated from `offset` when the
  // positions are rotary, or at positions `at` (T) int64 on x's device when given.
  std::vector<Tensor> heads(const Tensor& x, int64_t offset, const Tensor& at = Tensor());
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

// Note [Packed SwiGLU]
// Llama's MLP is down(silu(gate(x)) * up(x)), three Linears without biases. Here gate and up are
// one Linear C -> 2F (c_fc; its rows: gate's F, then up's F) whose output's two halves go to
// loom::swiglu as views: one GEMM over x instead of two (one read of x, one launch, a larger
// matrix for the GEMM to tile), the same values. The Hugging Face mapping (nn/hf_llama.cpp) packs
// gate_proj and up_proj into c_fc's rows on load and splits them on save.
// x: (B, T, C) -> (B, T, C): dropout(c_proj(swiglu(gate, up))), c_fc C -> 2F, c_proj F -> C.
class SwiGLUMLP : public Module {
 public:
  explicit SwiGLUMLP(const TransformerConfig& cfg);
  Tensor forward(const Tensor& x) override;

  int64_t hidden;  // F
  ModuleHolder<Linear> c_fc, c_proj;
  ModuleHolder<Dropout> dropout;
};

// Note [Post-norm]
// BERT and the original Transformer normalise after each residual add:
// x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)), and the model has no final norm (nn::Bert runs the
// stack without one; a model calling forward(x, final_norm) passes an Identity).
// TransformerConfig::norm_first = false (torch.nn.TransformerEncoderLayer's name)
// switches TransformerBlock::forward to those two lines; ln_1 and ln_2 keep their names, so
// BERT's attention.output.LayerNorm is ln_1 and its output.LayerNorm ln_2 (nn/hf_bert.cpp).
// nn::fuse leaves post-norm blocks plain (FusedTransformerBlock::fusable says no): fusing them
// would put each add into the norm right after it within the block (the same add_layer_norm)
// and hand nothing to the next block, not written yet.

// Pre-norm: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); post-norm (norm_first false):
// x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)). (B, T, C) -> (B, T, C).
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerConfig& cfg);
  Tensor forward(const Tensor& x) override;
  // The same, attention with a padding mask (SelfAttention::forward with key lengths).
  Tensor forward(const Tensor& x, const Tensor& key_lengths);
  // The same, attention with a KV cache (SelfAttention::forward with a cache).
  virtual Tensor forward(const Tensor& x, KVCache& cache, size_t layer);
  // The same with a static cache (SelfAttention::forward with one). Not virtual: a fused block
  // runs this plain composition of its children (their forward(x) computes the same).
  Tensor forward(const Tensor& x, StaticKVCache& cache, size_t layer);

  bool norm_first = true;  // TransformerConfig::norm_first

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

 private:
  // The block around attend(h) (one of attn's forwards): pre-norm or post-norm, the MLP after.
  template <typename Attend>
  Tensor around(const Tensor& x_in, const Attend& attend);
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
  // The same with a static cache (its begin and advance are the model's), never checkpointed.
  Tensor forward(const Tensor& x, Module& final_norm, StaticKVCache& cache);
  // The blocks with a padding mask (TransformerBlock::forward with key lengths), no final norm;
  // checkpointed as forward(x).
  Tensor forward(const Tensor& x, const Tensor& key_lengths);
  std::shared_ptr<TransformerBlock> block(size_t i) const { return at<TransformerBlock>(i); }

  bool checkpointing = false;

 protected:
  explicit TransformerStack(std::string type_name) : Sequential(std::move(type_name)) {}
};

}  // namespace loom::nn
