// Decoding through a preallocated KV cache (Note [Static KV cache] in nn/transformer.h), the
// one-token step replayed as a CUDA graph: GraphDecoder runs the prompt eagerly, then feeds one
// token at a time; on a CUDA device (with cuda_graph) it captures the step once and replays it
// (Note [Graph decode] in nn/graph_decode.cpp); on the CPU the same step runs eagerly, so the
// whole path is tested there. nn::generate uses it with SampleOptions::static_cache or cuda_graph.
// Leaves out: batches of prompts (B is 1), sampling on the device (sampled tokens are drawn on
// the host from the step's logits, as nn::generate's plain path draws them), speculative or
// multi-token steps, and chunked prefill (the prompt is one eager forward).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/causal_lm.h"
#include "nn/transformer.h"

namespace loom::nn {

class GraphDecoder {
 public:
  // A decoder for `model` (in eval mode; its parameters stay where they are) with a cache of
  // max_len positions (1 <= max_len <= model.max_context(): an error names both). cuda_graph:
  // replay the step as a CUDA graph when the model is on a CUDA device (the CPU ignores it).
  GraphDecoder(CausalLM& model, int64_t max_len, bool cuda_graph);
  ~GraphDecoder();
  GraphDecoder(const GraphDecoder&) = delete;
  GraphDecoder& operator=(const GraphDecoder&) = delete;

  // The prompt (non-empty ids, at most max_len) into the empty cache, eagerly -> the logits of
  // its last position (V) on the model's device. Starts a new sequence (the cache is reset).
  Tensor prefill(const std::vector<int64_t>& prompt);
  // `token` at the next position -> its logits (V). Graphed, the second step captures and every
  // later one replays: the tensor returned is then the graph's output, overwritten by the next
  // step. An error names the numbers when the cache is full.
  Tensor step(int64_t token);
  // The most likely next token after the last prefill or step: the argmax of its logits (the
  // first on ties, as sample_token's temperature 0), computed on the device (in the graph when
  // graphed) and read back: 8 bytes instead of V logits.
  int64_t greedy_token() const;

  int64_t length() const { return cache_.length; }  // positions in the cache
  int64_t max_len() const { return cache_.max_len; }
  bool graphed() const;  // whether steps replay a captured CUDA graph (from the second step)
  const StaticKVCache& cache() const { return cache_; }

 private:
  // The step that is captured: the model on token_ at the cache's position -> logits_ (V) and
  // next_ (1) int64, its argmax.
  void run_step();
  void capture();

  struct Graph;  // the CUDA graph when built with CUDA (nn/graph_decode.cpp)
  CausalLM& model_;
  bool cuda_graph_ = false;
  StaticKVCache cache_;
  Tensor token_;   // (1, 1) int64 on the device: the step's input, filled before each step
  Tensor logits_;  // (V): the last step's (a captured graph's output once graphed)
  Tensor next_;    // (1) int64: argmax of logits_
  int64_t steps_ = 0;
  std::unique_ptr<Graph> graph_;
};

}  // namespace loom::nn
