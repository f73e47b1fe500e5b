// DecoderLM: a CausalLM (nn/causal_lm.h) that is an embedding, a TransformerStack, a final norm and
// a head, as GPT (nn/gpt.h) and Llama (nn/llama.h) are: its forwards (plain, with a growing or a
// static KV cache), hidden and loss are written here once; a model gives its embeddings and parts.
// Leaves out: the models' own fields, names, init and sizes.
#pragma once

#include <cstdint>

#include "nn/causal_lm.h"
#include "nn/layers.h"

namespace loom::nn {

class DecoderLM : public CausalLM {
 public:
  using CausalLM::CausalLM;
  // idx: (B, T) int64 token ids -> head(hidden(idx)): logits (B, T, vocab_size).
  Tensor forward(const Tensor& idx) override;
  // The same from position cache.length on, appending to the cache and advancing its length.
  Tensor forward(const Tensor& idx, KVCache& cache) override;
  // The same with a static cache: begin, the embeddings at its positions, the blocks, advance.
  Tensor forward(const Tensor& idx, StaticKVCache& cache) override;
  // Mean cross-entropy of forward(idx) against targets (B, T) int64 (entries -1 are ignored),
  // the head and the loss as one op (linear_cross_entropy): the logits never leave it.
  bool has_loss() const override { return true; }
  Tensor loss(const Tensor& idx, const Tensor& targets) override;
  // forward(idx) without the head: the final norm's output (B, T, C).
  Tensor hidden(const Tensor& idx);

  // The embeddings: (B, T) ids -> (B, T, C), checking positions [start, start + T) fit the context
  // (what a pipeline's first stage runs before its blocks).
  virtual Tensor embed(const Tensor& idx, int64_t start) = 0;

 protected:
  // The embeddings for a static cache's forward, after its begin (its positions on the device,
  // cache.length the first of them as the host counts it).
  virtual Tensor embed_static(const Tensor& idx, const StaticKVCache& cache) = 0;
  // What embed checks: idx (B, T) int64, positions [start, start + T) within max_context(), the
  // error naming the config field that sets it.
  void check_positions(const Tensor& idx, int64_t start, const char* context_field) const;
  virtual TransformerStack& stack() = 0;
  virtual Module& final_norm() = 0;
  virtual Linear& head() = 0;
};

// Training FLOPs per token at context T as PaLM's appendix counts them (forward and backward):
// 6 N + 12 L H D T, N the parameters that multiply, L layers of H heads of size D. MFU divides
// tokens/s times this by the hardware's peak.
double decoder_flops_per_token(int64_t N, int64_t L, int64_t H, int64_t D, int64_t T);

}  // namespace loom::nn
