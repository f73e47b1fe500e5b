// Mistral folders read by nn/hf_llama.h (Note [Mistral as Llama]) against transformers itself: the
// fixture of tests/nn/golden/hf/mistral (scripts/make-hf-fixtures.py: a random MistralForCausalLM
// without a sliding window, its weights in bfloat16, and transformers' float32 logits, loss,
// gradients and greedy ids). A window caps the context, and the logits inside it are unchanged.
// Tolerances: Note [HF parity tolerances] in tests/nn/test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "autograd/ops/ops.h"
#include "nn/gpt_sample.h"
#include "nn/hf_llama.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"
#include "train/language_model.h"

using namespace loom;
using namespace loom::nn;
using loom::test::hf_fixture;
using loom::test::int_list;
using loom::test::read_bytes;
using loom::test::relative_error;
using loom::test::shifted_targets;
using loom::test::TempDir;
namespace fs = std::filesystem;

namespace {

const test::GoldenFile& expected() {
  static const test::GoldenFile g = test::read_golden_file(hf_fixture("mistral.txt"));
  return g;
}

constexpr double kLogitsTol = 1e-5, kGradTol = 1e-4;

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
  model->eval();
  Tensor logits = model->forward(ids());
  ASSERT_EQ(logits.shape(), expected().at("logits").shape());
  EXPECT_LT(relative_error(logits, expected().at("logits")), kLogitsTol);
  Tensor loss = model->loss(ids(), shifted_targets(ids()));
  EXPECT_LT(relative_error(loss, expected().at("loss")), kLogitsTol);
  loss.backward();
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  const int64_t C = 64, kv = 32;  // v_proj is rows [C + kv, C + 2 kv) of c_attn
  std::vector<std::pair<std::string, Tensor>> grads = {
      {"model.layers.0.self_attn.v_proj.weight",
       slice(p.at("layers.0.attn.c_attn.weight").grad(), 0, C + kv, C + 2 * kv)},
      {"model.layers.1.post_attention_layernorm.weight", p.at("layers.1.ln_2.weight").grad()},
      {"lm_head.weight", p.at("lm_head.weight").grad()}};
  for (const auto& [name, g] : grads)
    EXPECT_LT(relative_error(g, expected().at("grad." + name)), kGradTol) << name;
}

TEST(HfLlamaMistral, GreedyGenerationMatchesTransformers) {
  auto model = load_hf_llama(hf_fixture("mistral"));
  std::vector<int64_t> prompt = int_list(expected().at("prompt"));
  std::vector<int64_t> want = int_list(expected().at("generated"));
  SampleOptions o{.max_new_tokens = int64_t(want.size()), .temperature = 0.0};
  EXPECT_EQ(generate(*model, prompt, o), want);
}

// sliding_window 8: sequences up to 8 positions, whose logits are transformers' (the first 8
// positions of the fixture's, which see no later token); 12 are refused.
TEST(HfLlamaMistral, ASlidingWindowCapsTheContextAndChangesNothingInsideIt) {
  TempDir dir("loom_hf_mistral_window");
  std::string text = read_bytes(hf_fixture("mistral/config.json"));
  const std::string from = "\"sliding_window\": null";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"sliding_window\": 8");
  test::write_bytes(dir.file("config.json"), text);
  fs::copy_file(hf_fixture("mistral/model.safetensors"), dir.file("model.safetensors"));
  auto model = load_hf_llama(dir.path);
  EXPECT_EQ(model->config.max_seq_len, 8);
  model->eval();
  Tensor logits = model->forward(slice(ids(), 1, 0, 8));
  EXPECT_LT(relative_error(logits, slice(expected().at("logits"), 1, 0, 8)), kLogitsTol);
  const std::string e = test::error_of([&] { model->forward(ids()); });
  EXPECT_NE(e.find("12 positions exceed the context of 8 (max_seq_len)"), std::string::npos) << e;
}

// train_gpt's --init-from reads a Mistral folder as a Llama.
TEST(HfLlamaMistral, InitFromAMistralFolderMakesALlama) {
  train::LanguageModel lm = train::make_language_model(
      {.vocab_size = 96, .seq_len = 12, .init_from = hf_fixture("mistral")});
  auto* llama = dynamic_cast<Llama*>(lm.net.get());
  ASSERT_NE(llama, nullptr);
  llama->eval();
  EXPECT_LT(relative_error(llama->forward(ids()), expected().at("logits")), kLogitsTol);
}
