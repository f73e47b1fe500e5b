// The static KV cache (Note [Static KV cache] in nn/transformer.h) through the models' forward:
// in float64 on the CPU, GPT-2 and Llama (grouped key/value heads, rotary positions) tiny configs
// give the growing cache's logits to 1e-12 (measured: bit for bit) at every step, for a batch of 2
// and prompts of 1 and several tokens up to max_len; the buffers hold n_kv_heads heads; a second
// prompt position and a full cache are errors naming their numbers.
// Leaves out: generation through it (nn::generate, GraphDecoder and their tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "support/decode_models.h"

using namespace loom;
using namespace loom::nn;

namespace {

using test::max_abs_diff;
std::unique_ptr<GPT> tiny_gpt(uint64_t seed) { return test::tiny_decode_gpt(seed); }
std::unique_ptr<Llama> tiny_llama(uint64_t seed) { return test::tiny_decode_llama(seed); }

// ids (B, max_len): the first P through both caches at once, then one token at a time; the
// worst difference of the logits over every step (the growing cache's are the reference).
double worst_step_difference(CausalLM& m, const Tensor& ids, int64_t P) {
  NoGradGuard g;
  const int64_t L = ids.size(1);
  KVCache growing;
  StaticKVCache fixed(L);
  double worst =
      max_abs_diff(m.forward(slice(ids, 1, 0, P), fixed), m.forward(slice(ids, 1, 0, P), growing));
  for (int64_t t = P; t < L; ++t) {
    Tensor token = slice(ids, 1, t, t + 1);
    worst = std::max(worst, max_abs_diff(m.forward(token, fixed), m.forward(token, growing)));
  }
  EXPECT_EQ(fixed.length, L);
  EXPECT_EQ(fixed.position.item<int64_t>(), L);
  return worst;
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  manual_seed(seed);
  return randint(0, V, {B, T}, {.dtype = kI64});
}

}  // namespace

TEST(StaticKVCache, GPTStepsEqualTheGrowingCache) {
  auto m = tiny_gpt(1);
  for (int64_t P : {1, 5}) {
    EXPECT_LT(worst_step_difference(*m, random_ids(2, 16, 50, 2), P), 1e-12) << "prompt " << P;
  }
}

TEST(StaticKVCache, LlamaStepsEqualTheGrowingCache) {
  auto m = tiny_llama(3);
  for (int64_t P : {1, 6}) {
    EXPECT_LT(worst_step_difference(*m, random_ids(2, 16, 96, 4), P), 1e-12) << "prompt " << P;
  }
}

TEST(StaticKVCache, HoldsNKvHeadsAndIsRefusedBeyondItsLength) {
  auto m = tiny_llama(5);
  NoGradGuard g;
  StaticKVCache cache(6);
  m->forward(random_ids(1, 4, 96, 6), cache);
  ASSERT_EQ(cache.k.size(), 2u);
  EXPECT_EQ(cache.k[0].shape(), Shape({1, 2, 6, 16}));  // (B, n_kv_heads, max_len, D)
  try {
    m->forward(random_ids(1, 2, 96, 7), cache);
    FAIL() << "two positions after a prompt";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("with 4 cached positions the input must be one"),
              std::string::npos)
        << e.what();
  }
  m->forward(random_ids(1, 1, 96, 8), cache);
  m->forward(random_ids(1, 1, 96, 9), cache);
  try {
    m->forward(random_ids(1, 1, 96, 10), cache);
    FAIL() << "a seventh position in a cache of 6";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("6 cached positions and 1 new ones exceed its max_len of 6"),
        std::string::npos)
        << e.what();
  }
}
