// Mistral folders read by nn/hf_llama.h (Note [Mistral as Llama]) against transformers itself: the
// fixture of tests/nn/golden/hf/mistral (scripts/make-hf-fixtures.py: a random MistralForCausalLM
// without a sliding window, its weights in bfloat16, and transformers' float32 logits, loss,
// gradients and greedy ids). A window caps the context, and the logits inside it are unchanged.
// Tolerances: Note [HF parity tolerances] in tests/nn/test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <map>

#include "autograd/ops/ops.h"
#include "nn/hf_llama.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"
#include "train/language_model.h"

using namespace loom;
using namespace loom::nn;
using namespace loom::test;

namespace {

const GoldenFile& expected() {
  static const GoldenFile g = read_golden_file(hf_fixture("mistral.txt"));
  return g;
}

Tensor ids() { return expected().at("ids").to(kI64); }

}  // namespace

TEST(HfLlamaMistral, ConfigReadsAsALlama) {
  LlamaConfig c = llama_config_from_hf(HfConfig::read(hf_fixture("mistral/config.json")));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.rope_llama3.has_value());
  EXPECT_EQ(c.max_seq_len, 128);  // sliding_window null: no cap
}

TEST(HfLlamaMistral, LogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_llama(hf_fixture("mistral"));
  expect_logits_loss_and_backward(*model, expected());
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  const int64_t C = 64, kv = 32;  // v_proj is rows [C + kv, C + 2 kv) of c_attn
  std::vector<std::pair<std::string, Tensor>> grads = {
      {"model.layers.0.self_attn.v_proj.weight",
       slice(p.at("layers.0.attn.c_attn.weight").grad(), 0, C + kv, C + 2 * kv)},
      {"model.layers.1.post_attention_layernorm.weight", p.at("layers.1.ln_2.weight").grad()},
      {"lm_head.weight", p.at("lm_head.weight").grad()}};
  for (const auto& [name, g] : grads)
    EXPECT_LT(relative_error(g, expected().at("grad." + name)), kHfGradTol) << name;
}

TEST(HfLlamaMistral, GreedyGenerationMatchesTransformers) {
  expect_greedy_ids(*load_hf_llama(hf_fixture("mistral")), expected());
}

// sliding_window 8: sequences up to 8 positions, whose logits are transformers' (the first 8
// positions of the fixture's, which see no later token); 12 are refused.
TEST(HfLlamaMistral, ASlidingWindowCapsTheContextAndChangesNothingInsideIt) {
  TempDir dir("loom_hf_mistral_window");
  copy_fixture_with("mistral", dir.path, {{"\"sliding_window\": null", "\"sliding_window\": 8"}});
  auto model = load_hf_llama(dir.path);
  EXPECT_EQ(model->config.max_seq_len, 8);
  model->eval();
  Tensor logits = model->forward(slice(ids(), 1, 0, 8));
  EXPECT_LT(relative_error(logits, slice(expected().at("logits"), 1, 0, 8)), kHfLogitsTol);
  const std::string e = error_of([&] { model->forward(ids()); });
  EXPECT_NE(e.find("12 positions exceed the context of 8 (max_seq_len)"), std::string::npos) << e;
}

// train_gpt's --init-from reads a Mistral folder as a Llama.
TEST(HfLlamaMistral, InitFromAMistralFolderMakesALlama) {
  train::LanguageModel lm = train::make_language_model(
      {.vocab_size = 96, .seq_len = 12, .init_from = hf_fixture("mistral")});
  auto* llama = dynamic_cast<Llama*>(lm.net.get());
  ASSERT_NE(llama, nullptr);
  llama->eval();
  EXPECT_LT(relative_error(llama->forward(ids()), expected().at("logits")), kHfLogitsTol);
}
