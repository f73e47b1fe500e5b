// The tiny float64 GPT-2 and Llama that the KV-cache and decode tests generate with
// (tests/nn/test_transformer_static_cache.cpp, test_graph_decode.cpp), and the largest
// difference of two tensors. Leaves out: the CUDA decode tests' models (bf16, on the device).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/gpt.h"
#include "nn/llama.h"

namespace loom::test {

// max |a - b| over the elements (a test failure when the shapes differ).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// The model in float64 with every weight redrawn at spread 0.3 (norm weights about 1): the inits'
// 0.02 leave the logits nearly flat and every position's table row nearly alike; these make a
// token at the wrong position, or a stray key, move the logits far beyond 1e-12.
inline void float64_spread(nn::Module& m, uint64_t seed) {
  m.to(kF64);
  m.eval();
  manual_seed(seed);
  NoGradGuard g;
  for (auto& [name, p] : m.named_parameters()) {
    const bool norm_weight = p.dim() == 1 && !name.ends_with(".bias");
    p.copy_(randn(p.shape(), {.dtype = kF64}) * 0.3 + (norm_weight ? 1.0 : 0.0));
  }
}

// GPT-2: 2 blocks of width 16, 2 heads, 16 positions, 50 tokens.
inline std::unique_ptr<nn::GPT> tiny_decode_gpt(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_unique<nn::GPT>(
      nn::GPTConfig{.vocab_size = 50, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 16});
  float64_spread(*m, seed + 1);
  return m;
}

// Llama's "tiny" preset (4 heads, 2 key/value heads, llama3 rope) with 16 positions.
inline std::unique_ptr<nn::Llama> tiny_decode_llama(uint64_t seed) {
  nn::LlamaConfig c = nn::LlamaConfig::preset("tiny");
  c.max_seq_len = 16;
  manual_seed(seed);
  auto m = std::make_unique<nn::Llama>(c);
  float64_spread(*m, seed + 1);
  return m;
}

}  // namespace loom::test
