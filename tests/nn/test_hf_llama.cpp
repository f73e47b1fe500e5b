// Llama from Hugging Face folders (nn/hf_llama.h) against transformers itself: the fixture of
// tests/nn/golden/hf/llama (scripts/make-hf-fixtures.py: a random LlamaForCausalLM with grouped
// key/value heads and Llama 3 rope scaling, its weights in bfloat16, and transformers' float32
// logits, loss, gradients and greedy ids). Loading gives the same logits, loss, gradients and
// ids; saving writes transformers' bytes back; config fields loom cannot do are refused.
// Tolerances: Note [HF parity tolerances] in tests/nn/test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "autograd/ops/ops.h"
#include "nn/gpt_sample.h"
#include "nn/hf_llama.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

using loom::test::error_of;
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
  static const test::GoldenFile g = test::read_golden_file(hf_fixture("llama.txt"));
  return g;
}

constexpr double kLogitsTol = 1e-5, kGradTol = 1e-4;

Tensor ids() { return expected().at("ids").to(kI64); }

// The fixture's config.json with one field replaced, in a new folder beside its weights.
void write_config_with(const TempDir& dir, const std::string& from, const std::string& to) {
  std::string text = read_bytes(hf_fixture("llama/config.json"));
  size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  test::write_bytes(dir.file("config.json"), text);
  fs::copy_file(hf_fixture("llama/model.safetensors"), dir.file("model.safetensors"));
}

}  // namespace

TEST(HfLlama, ConfigMatchesTheFixture) {
  LlamaConfig c = llama_config_from_hf(HfConfig::read(hf_fixture("llama/config.json")));
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.ffn_hidden, 128);
  EXPECT_EQ(c.vocab_size, 96);
  EXPECT_EQ(c.rope_theta, 500000.0);
  ASSERT_TRUE(c.rope_llama3.has_value());
  EXPECT_EQ(c.rope_llama3->factor, 8.0);
  EXPECT_EQ(c.rope_llama3->original_max_position_embeddings, 32);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.max_seq_len, 128);
  EXPECT_EQ(c.num_parameters(), LlamaConfig::preset("tiny").num_parameters());
}

TEST(HfLlama, LogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_llama(hf_fixture("llama"));
  model->eval();
  Tensor logits = model->forward(ids());
  ASSERT_EQ(logits.shape(), expected().at("logits").shape());
  const double logits_err = relative_error(logits, expected().at("logits"));
  EXPECT_LT(logits_err, kLogitsTol);
  Tensor loss = model->loss(ids(), shifted_targets(ids()));
  EXPECT_LT(relative_error(loss, expected().at("loss")), kLogitsTol);
  loss.backward();
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  const int64_t C = 64, kv = 32;  // k_proj is rows [C, C + kv) of c_attn
  std::vector<std::pair<std::string, Tensor>> grads = {
      {"model.embed_tokens.weight", p.at("embed_tokens.weight").grad()},
      {"model.layers.0.self_attn.k_proj.weight",
       slice(p.at("layers.0.attn.c_attn.weight").grad(), 0, C, C + kv)},
      {"model.layers.1.input_layernorm.weight", p.at("layers.1.ln_1.weight").grad()},
      {"model.norm.weight", p.at("norm.weight").grad()}};
  double grad_err = 0;
  for (const auto& [name, g] : grads) {
    const double err = relative_error(g, expected().at("grad." + name));
    EXPECT_LT(err, kGradTol) << name;
    grad_err = std::max(grad_err, err);
  }
  std::cout << "[ parity   ] logits " << logits_err << ", loss "
            << relative_error(loss, expected().at("loss")) << ", gradients " << grad_err << "\n";
}

TEST(HfLlama, GreedyGenerationMatchesTransformers) {
  auto model = load_hf_llama(hf_fixture("llama"));
  std::vector<int64_t> prompt = int_list(expected().at("prompt"));
  std::vector<int64_t> want = int_list(expected().at("generated"));
  for (bool cache : {true, false}) {
    SampleOptions o{.max_new_tokens = int64_t(want.size()), .temperature = 0.0, .use_cache = cache};
    EXPECT_EQ(generate(*model, prompt, o), want) << "use_cache " << cache;
  }
}

// Saving in bfloat16 writes the fixture's bytes (transformers' save_pretrained); reloading gives
// the same parameters bit for bit.
TEST(HfLlama, SaveWritesTransformersBytesAndReloads) {
  auto model = load_hf_llama(hf_fixture("llama"));
  TempDir dir("loom_hf_llama");
  save_hf_llama(*model, dir.path, {.dtype = kBF16});
  EXPECT_TRUE(read_bytes(dir.file("model.safetensors")) ==
              read_bytes(hf_fixture("llama/model.safetensors")));
  auto back = load_hf_llama(dir.path);
  auto a = model->state_dict(), b = back->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector<double>(), b[i].second.to_vector<double>()) << a[i].first;
  }
  HfConfig mine = HfConfig::read(dir.file("config.json"));
  HfConfig theirs = HfConfig::read(hf_fixture("llama/config.json"));
  for (const char* key :
       {"architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "intermediate_size", "vocab_size", "rms_norm_eps",
        "tie_word_embeddings", "hidden_act", "max_position_embeddings", "head_dim", "dtype"})
    EXPECT_EQ(mine.text(key), theirs.text(key)) << key;
}

TEST(HfLlama, TiedEmbeddingsSaveNoHeadAndReload) {
  LlamaConfig c = LlamaConfig::preset("tiny");
  c.tie_embeddings = true;
  manual_seed(2);
  Llama model(c);
  TempDir dir("loom_hf_llama_tied");
  save_hf_llama(model, dir.path);
  HfCheckpoint ckpt(dir.path);
  EXPECT_FALSE(ckpt.contains("lm_head.weight"));
  auto back = load_hf_llama(dir.path);
  EXPECT_TRUE(back->config.tie_embeddings);
  EXPECT_EQ(back->embed_tokens->weight.to_vector<double>(),
            model.embed_tokens->weight.to_vector<double>());
  EXPECT_EQ(back->lm_head->weight.impl(), back->embed_tokens->weight.impl());
}

TEST(HfLlama, RefusesWhatLoomCannotDoNamingTheField) {
  struct Case {
    std::string from, to, field;
  };
  std::vector<Case> cases = {
      {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act"},
      {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
      {"\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias"},
      {"\"head_dim\": 16", "\"head_dim\": 32", "head_dim"},
      {"\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"", "rope_parameters"},
      {"\"model_type\": \"llama\"", "\"model_type\": \"gemma\"", "model_type"}};
  for (const auto& c : cases) {
    TempDir dir("loom_hf_llama_bad");
    write_config_with(dir, c.from, c.to);
    std::string e = error_of([&] { load_hf_llama(dir.path); });
    EXPECT_NE(e.find("field \"" + c.field + "\""), std::string::npos) << e;
    EXPECT_NE(e.find(dir.file("config.json")), std::string::npos) << e;
  }
}

TEST(HfLlama, ShapeErrorsNameTheFileTheTensorAndBothShapes) {
  TempDir dir("loom_hf_llama_shape");
  write_config_with(dir, "\"intermediate_size\": 128", "\"intermediate_size\": 96");
  std::string e = error_of([&] { load_hf_llama(dir.path); });
  EXPECT_NE(e.find(dir.file("model.safetensors")), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[128, 64]"), std::string::npos) << e;
  EXPECT_NE(e.find("[96, 64]"), std::string::npos) << e;
}
