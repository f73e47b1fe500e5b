// DecoderLM's forwards and loss (nn/decoder_lm.h): embed, the stack and its final norm, the head.
// Leaves out: each model's embeddings and parts (nn/gpt.cpp, nn/llama.cpp).
#include "nn/decoder_lm.h"

#include "autograd/ops/ops.h"

namespace loom::nn {

Tensor DecoderLM::forward(const Tensor& idx) {
  return head()(hidden(idx));  // (B, T, V)
}

Tensor DecoderLM::hidden(const Tensor& idx) {
  return stack().forward(embed(idx, 0), final_norm());  // norm(block_{L-1}(... block_0(x)))
}

Tensor DecoderLM::forward(const Tensor& idx, KVCache& cache) {
  Tensor x = stack().forward(embed(idx, cache.length), final_norm(), cache);
  cache.length += idx.size(1);
  return head()(x);
}

// Note [Static KV cache] in nn/transformer.h.
Tensor DecoderLM::forward(const Tensor& idx, StaticKVCache& cache) {
  LOOM_CHECK(idx.dim() == 2, type_name(), ": input ", describe(idx),
             " should be (B, T) int64 token ids");
  const int64_t T = idx.size(1);
  cache.begin(idx.size(0), T, idx.device());
  Tensor x = stack().forward(embed_static(idx, cache), final_norm(), cache);
  cache.advance(T);
  return head()(x);
}

// The head and the loss as one op (Note [The classifier in one node] in autograd/ops/linalg.cpp).
Tensor DecoderLM::loss(const Tensor& idx, const Tensor& targets) {
  LOOM_CHECK(targets.shape() == idx.shape(), type_name(), "::loss: targets ", describe(targets),
             " should have the input's shape ", idx.shape());
  return linear_cross_entropy(hidden(idx), head().weight, targets, Reduction::Mean, 0.0, -1);
}

void DecoderLM::check_positions(const Tensor& idx, int64_t start, const char* context_field) const {
  LOOM_CHECK(idx.dim() == 2 && idx.dtype() == kI64, type_name(), ": input ", describe(idx),
             " should be (B, T) int64 token ids");
  LOOM_CHECK(start + idx.size(1) <= max_context(), type_name(), ": ", start + idx.size(1),
             " positions exceed the context of ", max_context(), " (", context_field, ")");
}

double decoder_flops_per_token(int64_t N, int64_t L, int64_t H, int64_t D, int64_t T) {
  return 6.0 * double(N) + 12.0 * double(L) * double(H) * double(D) * double(T);
}

}  // namespace loom::nn
