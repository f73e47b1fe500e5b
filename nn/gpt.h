// GPT-2 (Radford et al., 2019) as nanoGPT and llm.c write it: token and position embeddings,
// n_layer pre-norm transformer blocks (nn/transformer.h: LayerNorm, causal self-attention,
// residual add; LayerNorm, MLP with the tanh GELU, residual add), a final LayerNorm, and the
// output head whose weight IS the token embedding's (Note [Tied embedding]). The model is plain:
// nn::fuse (nn/fuse.h) swaps in the fused blocks that training programs run. Parameter names follow
// nanoGPT without its "transformer." prefix: wte.weight, wpe.weight, h.0.ln_1.weight,
// h.0.attn.c_attn.weight, ..., ln_f.weight. A KV cache makes generation cost one position per new
// token (nn/gpt_sample.h). Leaves out: loading OpenAI's released weights, rotary/ALiBi positions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/decoder_lm.h"
#include "nn/layers.h"
#include "nn/transformer.h"

namespace loom::nn {

struct GPTConfig {
  int64_t vocab_size = 50257;  // GPT-2's BPE; llm.c pads it to 50304 (a multiple of 128)
  int64_t block_size = 1024;   // the longest context (the position table's rows)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;  // C; each head has C / n_head channels
  double dropout = 0.0;  // on the attention weights, after each residual branch and the input
  bool bias = true;      // in the Linears and LayerNorms

  // GPT-2's sizes by depth, as llm.c names them: "d12" (124M), "d24" (350M), "d36" (774M),
  // "d48" (1558M). An unknown name is an error listing these.
  static GPTConfig gpt2(const std::string& depth);
  // Checks the sizes (all positive, n_embd divisible by n_head); errors name the field.
  void check() const;
  // The blocks': causal, LayerNorm (eps 1e-5), the tanh GELU, MLP 4C wide.
  TransformerConfig block_config() const;
};

// Note [Tied embedding]
// GPT-2 uses one (V, C) matrix twice: as the token embedding (row lookup) and as the output head
// (logits = x @ W^T). Here lm_head.weight and wte.weight are the same Tensor (one TensorImpl), so
// parameters() and state_dict() list it once, under wte.weight; its gradient is the sum of the two
// uses (autograd accumulates both into the one .grad); an optimizer updates it once, and DDP
// reduces it once. Saving, loading and to() see one tensor.
class GPT : public DecoderLM {
 public:
  explicit GPT(GPTConfig cfg);
  // DecoderLM's forwards (T <= block_size), loss and hidden; a static cache's forward takes wpe's
  // rows at the cache's device positions.
  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t max_context() const override { return config.block_size; }
  Device device() const override { return wte->weight.device(); }

  // GPT-2's init: every Linear and Embedding weight ~ N(0, 0.02), biases 0, LayerNorms 1 and 0,
  // and the residual projections (attn.c_proj, mlp.c_proj) ~ N(0, 0.02 / sqrt(2 n_layer)).
  void init_weights();
  // Parameters counted once (the tied matrix once); without the position table if asked, as
  // GPT-2's paper counts (124M for d12 with V = 50257).
  int64_t num_parameters(bool include_position_table = true) const;
  // Floating-point operations of one training step per token at context T (forward and backward,
  // as PaLM's appendix counts them: 6 N + 12 L H D T, N without the position table); MFU divides
  // tokens/s times this by the hardware's peak.
  double flops_per_token(int64_t T) const;
  // Activation checkpointing per transformer block (Note [Activation checkpointing] in
  // autograd/checkpoint.h): training forwards keep only each block's input and recompute the
  // block in backward. The same gradients, a lower peak, one more forward of the blocks.
  void set_activation_checkpointing(bool on) { h->checkpointing = on; }
  bool activation_checkpointing() const { return h->checkpointing; }

  GPTConfig config;
  ModuleHolder<Embedding> wte, wpe;
  ModuleHolder<Dropout> drop;
  ModuleHolder<TransformerStack> h;  // n_layer TransformerBlocks, named h.0, h.1, ...
  ModuleHolder<Module> ln_f;         // make_norm: a LayerNorm
  ModuleHolder<Linear> lm_head;      // weight tied to wte.weight; no bias

  // The token and position embeddings: (B, T) ids -> (B, T, C), positions from start (what a
  // pipeline's first stage runs before its blocks, distributed/pipeline/pipeline_stage.h).
  Tensor embed(const Tensor& idx, int64_t start) override;

 protected:
  // The same at the cache's positions (T) int64 on idx's device, the last of them checked on the
  // host against block_size.
  Tensor embed_static(const Tensor& idx, const StaticKVCache& cache) override;
  TransformerStack& stack() override { return *h; }
  Module& final_norm() override { return *ln_f; }
  Linear& head() override { return *lm_head; }
};

}  // namespace loom::nn
