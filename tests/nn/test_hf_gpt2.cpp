// GPT-2 from Hugging Face folders (nn/hf_gpt2.h) against transformers itself: the fixtures of
// tests/nn/golden/hf/ (scripts/make-hf-fixtures.py: a random GPT-2 saved by save_pretrained, and
// transformers' float32 logits, loss, gradients and greedy ids for it). Loading gives the same
// logits, loss, gradients and ids; the bf16 and sharded folders load; saving writes
// transformers' own bytes back. The error cases are in test_hf_gpt2_errors.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "autograd/ops/ops.h"
#include "core/safetensors.h"
#include "nn/gpt_sample.h"
#include "nn/hf_gpt2.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

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
  static const test::GoldenFile g = test::read_golden_file(hf_fixture("gpt2.txt"));
  return g;
}

// Note [HF parity tolerances]
// float32 end to end: transformers and loom sum in different orders (their matmuls and attention
// against loom's), so each op's result differs by a few units of float32 rounding (6e-8). Through
// two blocks the logits agree to 3.7e-7 of their largest value, the loss to 1e-7 (measured
// 2026-12-05, torch 2.15, transformers 5.25); the 1e-5 leaves room for other BLAS builds.
// Gradients go through one more chain of products (backward through softmax and layer norm):
// measured 4.9e-7, held to 1e-4. A bf16 checkpoint's weights are bfloat16 values exactly, so
// loading them into float32 is compared bit for bit; the logits of those weights differ from the
// float32 model's by every weight's rounding (2^-9 relative each): measured 4.9e-3, held to
// 2e-2. A bfloat16 model also rounds every op's output: measured 1.1e-2, held to 5e-2. A wrong
// or transposed tensor moves the logits by their own size (relative error ~1).
constexpr double kLogitsTol = 1e-5, kGradTol = 1e-4, kBf16LogitsTol = 2e-2, kBf16ComputeTol = 5e-2;

Tensor ids() { return expected().at("ids").to(kI64); }

std::map<std::string, Tensor> params(const GPT& m) {
  std::map<std::string, Tensor> out;
  for (const auto& [n, t] : m.state_dict()) out[n] = t;
  return out;
}

void expect_bitwise_equal(const GPT& a, const GPT& b) {
  auto pa = params(a), pb = params(b);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& [n, t] : pa) {
    ASSERT_EQ(t.dtype(), pb.at(n).dtype()) << n;
    ASSERT_EQ(t.shape(), pb.at(n).shape()) << n;
    EXPECT_EQ(0,
              std::memcmp(t.data_ptr(), pb.at(n).data_ptr(), size_t(t.numel()) * t.element_size()))
        << n;
  }
}

}  // namespace

TEST(HfGpt2, ConfigMatchesTheFixture) {
  auto model = load_hf_gpt2(hf_fixture("gpt2"));
  const GPTConfig& c = model->config;
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.vocab_size, 96);
  EXPECT_EQ(c.block_size, 64);
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_EQ(model->wte->weight.dtype(), kF32);
}

TEST(HfGpt2, LogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_gpt2(hf_fixture("gpt2"));
  model->eval();
  Tensor logits = model->forward(ids());
  ASSERT_EQ(logits.shape(), expected().at("logits").shape());
  EXPECT_LT(relative_error(logits, expected().at("logits")), kLogitsTol);

  Tensor loss = model->loss(ids(), shifted_targets(ids()));
  EXPECT_LT(relative_error(loss, expected().at("loss")), kLogitsTol);
  loss.backward();
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  // The fixture names the checkpoint's tensors; Conv1D gradients are (in, out) like their weights.
  auto grad = [&](const std::string& loom_name, bool transposed) {
    Tensor g = p.at(loom_name).grad();
    return transposed ? transpose(g, 0, 1) : g;
  };
  EXPECT_LT(relative_error(grad("wte.weight", false),  // both uses of the tied matrix
                           expected().at("grad.transformer.wte.weight")),
            kGradTol);
  EXPECT_LT(relative_error(grad("h.0.attn.c_proj.weight", true),
                           expected().at("grad.transformer.h.0.attn.c_proj.weight")),
            kGradTol);
  for (const char* name : {"h.1.mlp.c_proj.bias", "h.1.ln_2.weight", "ln_f.bias"})
    EXPECT_LT(
        relative_error(grad(name, false), expected().at(std::string("grad.transformer.") + name)),
        kGradTol)
        << name;
}

TEST(HfGpt2, GreedyGenerationMatchesTransformers) {
  auto model = load_hf_gpt2(hf_fixture("gpt2"));
  std::vector<int64_t> prompt = int_list(expected().at("prompt"));
  std::vector<int64_t> want = int_list(expected().at("generated"));
  for (bool cache : {true, false}) {
    SampleOptions o{.max_new_tokens = int64_t(want.size()), .temperature = 0.0, .use_cache = cache};
    EXPECT_EQ(generate(*model, prompt, o), want) << "use_cache " << cache;
  }
}

TEST(HfGpt2, Bf16FolderHoldsTheRoundedWeights) {
  auto f32 = load_hf_gpt2(hf_fixture("gpt2"));
  auto widened = load_hf_gpt2(hf_fixture("gpt2-bf16"));  // bfloat16 file, float32 parameters
  auto bf16 = load_hf_gpt2(hf_fixture("gpt2-bf16"), kCPU, {.dtype = kBF16});
  auto p32 = params(*f32), pw = params(*widened), pb = params(*bf16);
  for (const auto& [name, t] : p32) {
    ASSERT_EQ(pb.at(name).dtype(), kBF16) << name;
    // torch rounds to nearest even as loom's cast does, so the file holds exactly these bits
    Tensor rounded = t.to(kBF16);
    EXPECT_EQ(rounded.to_vector<double>(), pb.at(name).to_vector<double>()) << name;
    EXPECT_EQ(rounded.to_vector<double>(), pw.at(name).to_vector<double>()) << name;
  }
  widened->eval();
  bf16->eval();
  NoGradGuard g;
  EXPECT_LT(relative_error(widened->forward(ids()), expected().at("logits")), kBf16LogitsTol);
  // bfloat16 parameters and activations (every op rounds to 8 bits of mantissa)
  EXPECT_LT(relative_error(bf16->forward(ids()), expected().at("logits")), kBf16ComputeTol);
}

TEST(HfGpt2, ShardedFolderLoadsTheSameWeights) {
  auto single = load_hf_gpt2(hf_fixture("gpt2"));
  auto sharded = load_hf_gpt2(hf_fixture("gpt2-sharded"));
  expect_bitwise_equal(*single, *sharded);
  sharded->eval();
  NoGradGuard g;
  EXPECT_LT(relative_error(sharded->forward(ids()), expected().at("logits")), kLogitsTol);
}

// Saving writes what transformers' save_pretrained wrote, byte for byte: the same names, shapes,
// dtypes, order, header and data (single file, bf16, shards and index), and it loads back.
TEST(HfGpt2, SaveWritesTransformersBytes) {
  struct Case {
    const char* fixture;
    HfSaveOptions options;
    std::vector<std::string> files;
  };
  std::vector<Case> cases = {
      {"gpt2", {}, {"model.safetensors"}},
      {"gpt2-bf16", {.dtype = kBF16}, {"model.safetensors"}},
      {"gpt2-sharded",
       {.max_shard_bytes = 50'000},  // the script's max_shard_size
       {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors", "model.safetensors.index.json"}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fixture);
    auto model = load_hf_gpt2(hf_fixture(c.fixture));  // float32 parameters in every case
    TempDir dir("loom_hf_save");
    save_hf_gpt2(*model, dir.path, c.options);
    for (const auto& f : c.files)
      EXPECT_TRUE(read_bytes(dir.file(f)) == read_bytes(hf_fixture(c.fixture) + "/" + f)) << f;
    auto back = load_hf_gpt2(dir.path);
    expect_bitwise_equal(*model, *back);
    EXPECT_EQ(back->config.n_layer, model->config.n_layer);
    EXPECT_EQ(back->config.block_size, model->config.block_size);
  }
}

// The written config.json holds the fields transformers needs, with the fixture's values.
TEST(HfGpt2, SavedConfigHasTransformersFields) {
  auto model = load_hf_gpt2(hf_fixture("gpt2-bf16"));
  TempDir dir("loom_hf_config");
  save_hf_gpt2(*model, dir.path, {.dtype = kBF16});
  HfConfig mine = HfConfig::read(dir.file("config.json"));
  HfConfig theirs = HfConfig::read(hf_fixture("gpt2-bf16/config.json"));
  for (const char* key :
       {"activation_function", "architectures", "model_type", "n_embd", "n_head", "n_inner",
        "n_layer", "n_positions", "vocab_size", "layer_norm_epsilon", "tie_word_embeddings",
        "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "dtype", "attn_pdrop"})
    EXPECT_EQ(mine.text(key), theirs.text(key)) << key;
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
}

// The released gpt2 folders were saved from GPT2Model: no "transformer." prefix, and older
// transformers stored each block's causal mask (attn.bias) and attn.masked_bias; a tied
// lm_head.weight may be there too. All load, to the same logits.
TEST(HfGpt2, LoadsTheHubLayoutWithMaskBuffers) {
  SafetensorsFile f = read_safetensors(hf_fixture("gpt2/model.safetensors"));
  NamedTensors renamed;
  for (auto& [name, t] : f.tensors) renamed.emplace_back(name.substr(strlen("transformer.")), t);
  for (int i = 0; i < 2; ++i) {
    renamed.emplace_back("h." + std::to_string(i) + ".attn.bias", ones({1, 1, 64, 64}));
    renamed.emplace_back("h." + std::to_string(i) + ".attn.masked_bias", full({}, -1e4));
  }
  renamed.emplace_back("lm_head.weight", f.at("transformer.wte.weight"));
  TempDir dir("loom_hf_hub");
  fs::copy_file(hf_fixture("gpt2/config.json"), dir.file("config.json"));
  write_safetensors(dir.file("model.safetensors"), renamed, {{"format", "pt"}});
  auto model = load_hf_gpt2(dir.path);
  expect_bitwise_equal(*model, *load_hf_gpt2(hf_fixture("gpt2")));
}
