// GraphDecoder (nn/graph_decode.h) and nn::generate through it on the CPU, where the graphed
// step runs eagerly: in float64, GPT-2 and Llama tiny configs give the growing cache's tokens
// exactly, greedy and sampled, with prompts of 1 and several tokens up to the whole context; a
// reused decoder (a second prompt over the first one's stale slots, an oversized cache) keeps the
// growing cache's logits to 1e-12; a fused GPT's tokens too; the limits are errors naming their
// numbers.
// Leaves out: the CUDA graph itself (tests/nn/test_cuda_graph_decode.cpp), the cache's forward
// alone (tests/nn/test_transformer_static_cache.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/fuse.h"
#include "nn/gpt_sample.h"
#include "nn/graph_decode.h"
#include "support/decode_models.h"

using namespace loom;
using namespace loom::nn;

namespace {

using test::max_abs_diff;
std::unique_ptr<GPT> tiny_gpt(uint64_t seed) { return test::tiny_decode_gpt(seed); }
std::unique_ptr<Llama> tiny_llama(uint64_t seed) { return test::tiny_decode_llama(seed); }

}  // namespace

// nn::generate through the static cache (graphed or not: on the CPU the same eager step) gives the
// growing cache's tokens, greedy and sampled, prompts of 1 and several tokens, up to the context.
TEST(GenerateStatic, GivesTheGrowingCachesTokens) {
  auto gpt = tiny_gpt(11);
  auto llama = tiny_llama(12);
  for (CausalLM* m : std::vector<CausalLM*>{gpt.get(), llama.get()}) {
    for (std::vector<int64_t> prompt :
         {std::vector<int64_t>{7}, std::vector<int64_t>{3, 1, 4, 1}}) {
      const int64_t n = 16 - int64_t(prompt.size());  // to max_len = the whole context
      for (double temperature : {0.0, 1.0}) {
        SampleOptions o{.max_new_tokens = n, .temperature = temperature, .top_k = 10, .seed = 5};
        const auto want = generate(*m, prompt, o);
        ASSERT_EQ(int64_t(want.size()), n);
        // Not one token over and over: the comparison would see little of the cache.
        EXPECT_GE(std::set<int64_t>(want.begin(), want.end()).size(), 3u) << m->type_name();
        o.static_cache = true;
        EXPECT_EQ(generate(*m, prompt, o), want) << m->type_name() << " t=" << temperature;
        o.static_cache = false, o.cuda_graph = true;
        EXPECT_EQ(generate(*m, prompt, o), want) << m->type_name() << " t=" << temperature;
      }
    }
  }
}

TEST(GenerateStatic, NamesTheNumbersBeyondMaxLen) {
  auto m = tiny_gpt(13);
  SampleOptions o{.max_new_tokens = 10, .temperature = 0.0, .static_cache = true, .max_len = 12};
  try {
    generate(*m, {1, 2, 3}, o);
    FAIL() << "3 + 10 positions in a cache of 12";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "the prompt (3 tokens) and 10 new tokens exceed the static cache's max_len of 12"),
        std::string::npos)
        << e.what();
  }
  o.max_new_tokens = 9;  // exactly 12
  EXPECT_EQ(generate(*m, {1, 2, 3}, o).size(), 9u);
  o.max_len = 32;  // beyond block_size 16
  EXPECT_THROW(generate(*m, {1, 2, 3}, o), Error);
}

// A second prompt over the first sequence's slots (stale keys beyond the new length): the same
// logits as a fresh growing cache; a larger max_len than needed (slots never written) too; and
// the decoder's greedy token is the argmax of the logits it returned.
TEST(GraphDecoder, ReusedAndOversizedCachesKeepTheLogits) {
  auto m = tiny_llama(14);
  GraphDecoder d(*m, 16, /*cuda_graph=*/true);
  EXPECT_FALSE(d.graphed());  // the CPU runs the step eagerly
  for (const std::vector<int64_t>& prompt :
       {std::vector<int64_t>{5, 6, 7, 8, 9, 10}, std::vector<int64_t>{42, 17}}) {
    NoGradGuard g;
    KVCache growing;
    Tensor ids = from_vector(prompt, {1, int64_t(prompt.size())});
    Tensor want = select(select(m->forward(ids, growing), 0, 0), 0, ids.size(1) - 1);
    Tensor got = d.prefill(prompt);
    EXPECT_LT(max_abs_diff(got, want), 1e-12);
    for (int64_t token : {3, 1, 4}) {
      const std::vector<double> l = got.to_vector<double>();
      EXPECT_EQ(d.greedy_token(), int64_t(std::max_element(l.begin(), l.end()) - l.begin()));
      got = d.step(token);
      want = select(
          select(m->forward(from_vector(std::vector<int64_t>{token}, {1, 1}), growing), 0, 0), 0,
          0);
      EXPECT_LT(max_abs_diff(got, want), 1e-12) << "token " << token;
    }
    EXPECT_EQ(d.length(), int64_t(prompt.size()) + 3);
  }
  EXPECT_FALSE(d.graphed());
}

TEST(GraphDecoder, RefusesAFullCacheATrainingModelAndAStepBeforeAPrompt) {
  auto m = tiny_gpt(15);
  GraphDecoder d(*m, 3, true);
  EXPECT_THROW(d.step(1), Error);  // no prompt yet
  d.prefill({1, 2});
  d.step(3);
  try {
    d.step(4);
    FAIL() << "a fourth position in a cache of 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the cache's 3 positions are full (3 written)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(GraphDecoder(*m, 17, false), Error);  // beyond block_size 16
  m->train();
  EXPECT_THROW(GraphDecoder(*m, 8, false), Error);
}

// A fused GPT (nn::fuse) runs the static cache through its blocks' plain composition: the same
// tokens as the growing cache through the fused blocks.
TEST(GenerateStatic, FusedGPTGivesTheSameTokens) {
  auto m = tiny_gpt(16);
  m->to(kF32);
  EXPECT_FALSE(fuse(*m).empty());
  SampleOptions o{.max_new_tokens = 12, .temperature = 0.0};
  const auto want = generate(*m, {2, 7, 1}, o);
  o.static_cache = true;
  EXPECT_EQ(generate(*m, {2, 7, 1}, o), want);
}
