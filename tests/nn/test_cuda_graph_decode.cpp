// GraphDecoder (nn/graph_decode.h) on a GPU: the decode step captured once and replayed as a CUDA
// graph gives the tokens of the same static-cache step run eagerly, greedy and sampled, in float32
// and bfloat16, for GPT-2 and Llama tiny configs; the decoder really replays (graphed() after the
// second step); a captured decoder reused for a second prompt still does; in float32 the graphed
// logits stay within rounding of the growing cache's. Skipped without a CUDA device.
// Leaves out: speed (benchmarks/bench_decode.cpp --decode graph) and the CPU checks against the
// growing cache in float64 (tests/nn/test_graph_decode.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/gpt_sample.h"
#include "nn/graph_decode.h"
#include "support/decode_models.h"
using namespace loom;
using namespace loom::nn;

namespace {

const Device kGpu = cuda_device(0);

// Weights redrawn at spread 0.3 (norm weights about 1), so the logits are far from flat and
// greedy decoding moves between tokens; then the model in `dt` on the GPU, in eval mode.
void spread_on_gpu(Module& m, uint64_t seed, DType dt) {
  manual_seed(seed);
  {
    NoGradGuard g;
    for (auto& [name, p] : m.named_parameters()) {
      const bool norm_weight = p.dim() == 1 && !name.ends_with(".bias");
      p.copy_(randn(p.shape()) * 0.3 + (norm_weight ? 1.0 : 0.0));
    }
  }
  m.to(dt);
  m.to(kGpu);
  m.eval();
}

std::unique_ptr<CausalLM> tiny(const std::string& arch, DType dt) {
  manual_seed(1);
  std::unique_ptr<CausalLM> m;
  if (arch == "gpt") {
    m = std::make_unique<GPT>(
        GPTConfig{.vocab_size = 50, .block_size = 40, .n_layer = 2, .n_head = 2, .n_embd = 32});
  } else {
    LlamaConfig c = LlamaConfig::preset("tiny");  // 4 heads, 2 key/value heads, llama3 rope
    c.max_seq_len = 40;
    m = std::make_unique<Llama>(c);
  }
  spread_on_gpu(*m, 2, dt);
  return m;
}

using test::max_abs_diff;

}  // namespace

TEST(CudaGraphDecode, GraphedTokensEqualTheEagerStaticCachesForGPTAndLlama) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string arch : {"gpt", "llama"}) {
    for (DType dt : {kF32, kBF16}) {
      auto m = tiny(arch, dt);
      const std::vector<int64_t> prompt{3, 1, 4, 1, 5};
      for (double temperature : {0.0, 1.0}) {
        SampleOptions o{.max_new_tokens = 35, .temperature = temperature, .top_k = 10, .seed = 7};
        o.static_cache = true;
        const auto eager = generate(*m, prompt, o);
        ASSERT_EQ(eager.size(), 35u);
        o.cuda_graph = true;
        EXPECT_EQ(generate(*m, prompt, o), eager)
            << arch << " " << dtype_name(dt) << " temperature " << temperature;
      }
    }
  }
}

// The decoder captures at its second step and replays from then on; reused for a second prompt
// (the cache reset, the graph kept) it gives an eager decoder's logits for it.
TEST(CudaGraphDecode, ReplaysAndIsReusedForASecondPrompt) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string arch : {"gpt", "llama"}) {
    auto m = tiny(arch, kF32);
    GraphDecoder graphed(*m, 40, /*cuda_graph=*/true), eager(*m, 40, /*cuda_graph=*/false);
    for (const std::vector<int64_t>& prompt :
         {std::vector<int64_t>{9, 8, 7, 6, 5, 4, 3}, std::vector<int64_t>{2, 11}}) {
      Tensor a = graphed.prefill(prompt), b = eager.prefill(prompt);
      EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << arch << " prefill";
      for (int n = 0; n < 20; ++n) {
        const int64_t next = eager.greedy_token();
        EXPECT_EQ(graphed.greedy_token(), next) << arch << " step " << n;
        a = graphed.step(next), b = eager.step(next);
        EXPECT_LT(max_abs_diff(a, b), 1e-5) << arch << " step " << n;
      }
      EXPECT_TRUE(graphed.graphed()) << arch;
      EXPECT_FALSE(eager.graphed()) << arch;
      EXPECT_EQ(graphed.length(), int64_t(prompt.size()) + 20);
      EXPECT_EQ(graphed.cache().position.item<int64_t>(), graphed.length());
    }
  }
}

// In float32 the graphed decode's logits are the growing cache's to rounding (the static cache
// only adds masked keys): each step against KVCache's forward of the same token.
TEST(CudaGraphDecode, Float32LogitsFollowTheGrowingCache) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string arch : {"gpt", "llama"}) {
    auto m = tiny(arch, kF32);
    GraphDecoder d(*m, 40, true);
    NoGradGuard g;
    KVCache growing;
    const std::vector<int64_t> prompt{4, 2, 42};
    Tensor got = d.prefill(prompt);
    Tensor want = m->forward(from_vector(prompt, {1, 3}).to(kGpu), growing);
    EXPECT_LT(max_abs_diff(got, select(select(want, 0, 0), 0, 2)), 1e-4) << arch;
    for (int n = 0; n < 30; ++n) {
      const int64_t next = d.greedy_token();
      got = d.step(next);
      want = m->forward(from_vector(std::vector<int64_t>{next}, {1, 1}).to(kGpu), growing);
      EXPECT_LT(max_abs_diff(got, select(select(want, 0, 0), 0, 0)), 1e-4) << arch << " step " << n;
    }
  }
}
