// CausalLM: what generation (nn/gpt_sample.h) needs of a decoder-only language model, so one
// generate() serves GPT (nn/gpt.h) and Llama (nn/llama.h): the logits of token ids, with and
// without a KV cache, the vocabulary size, the longest context, and the device of its weights.
// Leaves out: training (a model's own forward and loss), encoders and encoder-decoder models.
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "nn/transformer.h"

namespace loom::nn {

class CausalLM : public Module {
 public:
  explicit CausalLM(std::string type_name) : Module(std::move(type_name)) {}
  // idx: (B, T) int64 token ids -> logits (B, T, vocab_size()).
  Tensor forward(const Tensor& idx) override = 0;
  // The same from position cache.length on, appending to the cache and advancing its length.
  virtual Tensor forward(const Tensor& idx, KVCache& cache) = 0;
  // The same with a preallocated cache, from position cache.position (a device tensor) on:
  // StaticKVCache::begin, the blocks, advance (Note [Static KV cache] in nn/transformer.h).
  virtual Tensor forward(const Tensor& idx, StaticKVCache& cache) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;  // positions a sequence may have
  virtual Device device() const = 0;        // where token ids go
};

}  // namespace loom::nn
