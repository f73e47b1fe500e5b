// The post-norm block and the key-length path of nn/transformer.h (Note [Post-norm]): a causal
// post-norm stack decoding with a KV cache equals its full forward; the key-length forwards run
// the attention's and the blocks' forward hooks as the plain forwards do; with all lengths
// full, the key-length forward is the plain one. The BERT model on top: tests/nn/test_bert.cpp.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/fused.h"
#include "nn/transformer.h"

using namespace loom;
using namespace loom::nn;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

TransformerConfig post_norm(bool causal) {
  return TransformerConfig{.n_embd = 16, .n_head = 4, .causal = causal, .norm_first = false};
}

}  // namespace

TEST(TransformerPostNorm, KVCacheDecodeEqualsTheFullForward) {
  manual_seed(21);
  TransformerStack stack(post_norm(/*causal=*/true), 2);
  stack.to(kF64);
  Tensor x = randn({2, 6, 16}, {.dtype = kF64});
  Identity none;
  Tensor full = stack.forward(x);
  KVCache cache;
  std::vector<Tensor> steps{stack.forward(slice(x, 1, 0, 3), none, cache)};
  cache.length = 3;
  for (int64_t t = 3; t < 6; ++t, ++cache.length)
    steps.push_back(stack.forward(slice(x, 1, t, t + 1), none, cache));
  EXPECT_LT(max_abs_diff(cat(steps, 1), full), 1e-12);
}

TEST(TransformerPostNorm, KeyLengthsRunTheForwardHooksAndFullLengthsChangeNothing) {
  manual_seed(22);
  TransformerStack stack(post_norm(/*causal=*/false), 2);
  int attn_calls = 0, block_calls = 0;
  stack.block(0)->attn->set_forward_hooks({.before = [&](Module&) { ++attn_calls; }});
  stack.block(1)->set_forward_hooks({.before = [&](Module&) { ++block_calls; }});
  Tensor x = randn({2, 5, 16});
  Tensor plain = stack.forward(x);
  EXPECT_EQ(attn_calls, 1);
  EXPECT_EQ(block_calls, 1);
  Tensor full = stack.forward(x, from_vector<int64_t>({5, 5}, {2}));
  EXPECT_EQ(attn_calls, 2);
  EXPECT_EQ(block_calls, 2);
  EXPECT_LT(max_abs_diff(full, plain), 1e-6);  // float32, the same sums
  Tensor padded = stack.forward(x, from_vector<int64_t>({5, 3}, {2}));
  EXPECT_LT(max_abs_diff(select(padded, 0, 0), select(plain, 0, 0)), 1e-6);
  EXPECT_GT(max_abs_diff(select(padded, 0, 1), select(plain, 0, 1)), 1e-3);
}
