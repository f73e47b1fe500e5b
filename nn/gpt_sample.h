// Text generation from a GPT: the next token drawn from the last position's logits (temperature,
// top-k), one position at a time, with a KV cache (nn/gpt.h) so each new token costs one position
// of every layer, not the whole prefix again.
// Leaves out: batches of prompts, nucleus (top-p) sampling, beam search, stop sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/gpt.h"

namespace loom::nn {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // 0: always the most likely token (greedy)
  int64_t top_k = 0;         // draw among the k most likely tokens only (0: all)
  uint64_t seed = 0;         // the draws' random stream
  bool use_cache = true;     // false: run the whole prefix for every token (the cache's oracle)
};

// Draws one token id from logits (V), float on any device: softmax(logits / temperature) over
// the top_k largest. `u` is a uniform draw in [0, 1).
int64_t sample_token(const Tensor& logits, double temperature, int64_t top_k, double u);

// The new tokens after `prompt` (non-empty ids < vocab_size). The model runs in eval mode without
// gradients and is left in the mode it had; prompt plus new tokens must fit in block_size (an
// error names the three numbers).
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& options);

}  // namespace loom::nn
