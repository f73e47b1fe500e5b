// Qwen2 folders read by nn/hf_llama.h (Note [Qwen2 as Llama]) against transformers itself: the
// fixture of tests/nn/golden/hf/qwen2 (scripts/make-hf-fixtures.py: a random Qwen2ForCausalLM with
// q, k and v biases and a tied head, its weights in bfloat16, and transformers' float32 logits,
// loss, gradients and greedy ids). Saving writes transformers' bytes and a Qwen2 config back.
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
  static const GoldenFile g = read_golden_file(hf_fixture("qwen2.txt"));
  return g;
}

Tensor ids() { return expected().at("ids").to(kI64); }

}  // namespace

TEST(HfLlamaQwen2, ConfigReadsAsALlamaWithQkvBiases) {
  LlamaConfig c = llama_config_from_hf(HfConfig::read(hf_fixture("qwen2/config.json")));
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_seq_len, 128);  // use_sliding_window false
  // q, k and v biases: C + 2 kv per layer beyond the Llama of the same sizes.
  LlamaConfig plain = c;
  plain.qkv_bias = false;
  EXPECT_EQ(c.num_parameters(), plain.num_parameters() + 2 * (64 + 2 * 32));
  EXPECT_EQ(Llama(c).num_parameters(), c.num_parameters());
}

TEST(HfLlamaQwen2, LogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_llama(hf_fixture("qwen2"));
  expect_logits_loss_and_backward(*model, expected());
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  const int64_t C = 64, kv = 32;  // c_attn's rows: q [0, C), k [C, C + kv), v [C + kv, C + 2 kv)
  std::vector<std::pair<std::string, Tensor>> grads = {
      {"model.embed_tokens.weight", p.at("embed_tokens.weight").grad()},  // and the tied head
      {"model.layers.0.self_attn.q_proj.bias",
       slice(p.at("layers.0.attn.c_attn.bias").grad(), 0, 0, C)},
      {"model.layers.1.self_attn.k_proj.bias",
       slice(p.at("layers.1.attn.c_attn.bias").grad(), 0, C, C + kv)},
      {"model.layers.1.self_attn.v_proj.weight",
       slice(p.at("layers.1.attn.c_attn.weight").grad(), 0, C + kv, C + 2 * kv)}};
  for (const auto& [name, g] : grads)
    EXPECT_LT(relative_error(g, expected().at("grad." + name)), kHfGradTol) << name;
}

TEST(HfLlamaQwen2, GreedyGenerationMatchesTransformers) {
  expect_greedy_ids(*load_hf_llama(hf_fixture("qwen2")), expected());
}

// Saving in bfloat16 writes transformers' bytes and a config transformers reads as a Qwen2;
// reloading gives the same parameters.
TEST(HfLlamaQwen2, SaveWritesTransformersBytesAndAQwen2Config) {
  auto model = load_hf_llama(hf_fixture("qwen2"));
  TempDir dir("loom_hf_qwen2");
  save_hf_llama(*model, dir.path, {.dtype = kBF16});
  EXPECT_EQ(read_bytes(dir.file("model.safetensors")),
            read_bytes(hf_fixture("qwen2/model.safetensors")));
  HfConfig saved = HfConfig::read(dir.file("config.json"));
  EXPECT_EQ(saved.string("model_type"), "qwen2");
  EXPECT_FALSE(saved.boolean("use_sliding_window"));
  EXPECT_FALSE(saved.has("attention_bias"));
  auto back = load_hf_llama(dir.path);
  EXPECT_TRUE(back->config.qkv_bias);
  EXPECT_EQ(back->layers->named_parameters().size(), model->layers->named_parameters().size());
  EXPECT_LT(relative_error(back->forward(ids()), model->forward(ids())), 1e-12);
}

// train_gpt's --init-from reads a Qwen2 folder as a Llama with q, k and v biases.
TEST(HfLlamaQwen2, InitFromAQwen2FolderMakesALlamaWithBiases) {
  train::LanguageModel lm = train::make_language_model(
      {.vocab_size = 96, .seq_len = 12, .init_from = hf_fixture("qwen2")});
  auto* llama = dynamic_cast<Llama*>(lm.net.get());
  ASSERT_NE(llama, nullptr);
  EXPECT_TRUE(llama->config.qkv_bias);
  llama->eval();
  EXPECT_LT(relative_error(llama->forward(ids()), expected().at("logits")), kHfLogitsTol);
}

// use_sliding_window true caps the context at the window, as Mistral's; the logits inside it are
// unchanged (the first 8 positions of the fixture's).
TEST(HfLlamaQwen2, AWindowInUseCapsTheContext) {
  TempDir dir("loom_hf_qwen2_window");
  copy_fixture_with("qwen2", dir.path,
                    {{"\"sliding_window\": null", "\"sliding_window\": 8"},
                     {"\"use_sliding_window\": false", "\"use_sliding_window\": true"}});
  auto model = load_hf_llama(dir.path);
  EXPECT_EQ(model->config.max_seq_len, 8);
  EXPECT_LT(relative_error(model->forward(slice(ids(), 1, 0, 8)),
                           slice(expected().at("logits"), 1, 0, 8)),
            kHfLogitsTol);
}
