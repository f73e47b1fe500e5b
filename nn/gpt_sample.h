// Text generation from a causal language model (nn/causal_lm.h: GPT, Llama): the next token drawn
// from the last position's logits (temperature, top-k, top-p), one position at a time, with a KV
// cache so each new token costs one position of every layer, not the whole prefix again; it stops
// early at a stop token. With static_cache the cache is preallocated and every step has the same
// shapes; with cuda_graph, on a CUDA device, the step is captured once and replayed
// (nn/graph_decode.h).
// Leaves out: batches of prompts, beam search, repetition penalties, multi-token stop sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/causal_lm.h"
#include "nn/gpt.h"
#include "nn/llama.h"

namespace loom::nn {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // 0: always the most likely token (greedy)
  int64_t top_k = 0;         // draw among the k most likely tokens only (0: all)
  double top_p = 1.0;        // then among the fewest most likely whose probability reaches p
  std::vector<int64_t> stop_tokens =
      {};                 // generation ends after emitting one of these (it is kept)
  uint64_t seed = 0;      // the draws' random stream
  bool use_cache = true;  // false: run the whole prefix for every token (the cache's oracle)
  // A preallocated cache of max_len positions (Note [Static KV cache] in nn/transformer.h) in
  // place of the growing one; greedy tokens are then the argmax taken on the device.
  bool static_cache = false;
  // The static cache's step replayed as a CUDA graph when the model is on a CUDA device (Note
  // [Graph decode] in nn/graph_decode.cpp); on the CPU the same step runs eagerly. Implies
  // static_cache.
  bool cuda_graph = false;
  int64_t max_len = 0;  // the static cache's positions; 0: the prompt's plus max_new_tokens
};

// Draws one token id from logits (V), float on any device: softmax(logits / temperature) over
// the top_k largest, then over the smallest set of the most likely whose probabilities sum to at
// least top_p (nucleus sampling, Holtzman et al. 2019; top_p in (0, 1], 1 keeps all). `u` is a
// uniform draw in [0, 1).
int64_t sample_token(const Tensor& logits, double temperature, int64_t top_k, double u,
                     double top_p = 1.0);

// The new tokens after `prompt` (non-empty ids < vocab_size): max_new_tokens of them, or fewer
// ending in a stop token. The model runs in eval mode without gradients and is left in the mode
// it had; prompt plus new tokens must fit in the model's context (an error names the three
// numbers), and in max_len with a static cache (the same).
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& options);

}  // namespace loom::nn
