// nn/hf_checkpoint: the Llama fixture of tests/nn/golden/hf/ (scripts/make-hf-fixtures.py) opened
// with HfCheckpoint, every tensor's name, shape and dtype checked against its config.json; tensors
// handed out converted, copies checked and transposed; load_hf_tensors / save_hf_tensors with a
// small mapping onto Linear layers (the pattern of Note [Adding a Hugging Face model]), its
// errors, and loading without a host copy of any tensor. GPT-2's mapping is tested in
// test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/ops/ops.h"
#include "nn/hf_checkpoint.h"
#include "nn/layers.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using loom::test::read_bytes;
using loom::test::TempDir;
namespace fs = std::filesystem;

using loom::test::expect_error;

namespace {

std::string llama_dir() { return test::golden_dir() + "hf/llama"; }

// The tensors a LlamaForCausalLM of this config.json has, written out from the architecture
// (the test's own oracle: it reads the config with nlohmann, not with HfConfig).
std::map<std::string, Shape> llama_shapes(const nlohmann::json& c) {
  const int64_t H = c["hidden_size"], L = c["num_hidden_layers"], nh = c["num_attention_heads"],
                nkv = c["num_key_value_heads"], I = c["intermediate_size"], V = c["vocab_size"];
  const int64_t D = c.contains("head_dim") ? int64_t(c["head_dim"]) : H / nh;
  std::map<std::string, Shape> s = {{"model.embed_tokens.weight", {V, H}},
                                    {"model.norm.weight", {H}}};
  if (!c.value("tie_word_embeddings", true)) s["lm_head.weight"] = {V, H};
  for (int64_t i = 0; i < L; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    s[l + "input_layernorm.weight"] = {H};
    s[l + "post_attention_layernorm.weight"] = {H};
    s[l + "self_attn.q_proj.weight"] = {nh * D, H};
    s[l + "self_attn.k_proj.weight"] = {nkv * D, H};
    s[l + "self_attn.v_proj.weight"] = {nkv * D, H};
    s[l + "self_attn.o_proj.weight"] = {H, nh * D};
    s[l + "mlp.gate_proj.weight"] = {I, H};
    s[l + "mlp.up_proj.weight"] = {I, H};
    s[l + "mlp.down_proj.weight"] = {H, I};
  }
  return s;
}

// Two of the Llama's projections as Linear layers: "0.weight" <- layer 0's k_proj (32, 64),
// "1.weight" <- its q_proj (64, 64).
std::shared_ptr<Sequential> two_projections() {
  return std::make_shared<Sequential>(std::make_shared<Linear>(64, 32, false),
                                      std::make_shared<Linear>(64, 64, false));
}
const HfTensorMap kTwoProjections = {{"model.layers.0.self_attn.k_proj.weight", "0.weight"},
                                     {"model.layers.0.self_attn.q_proj.weight", "1.weight"}};
bool ignore_the_rest(const std::string& name) {
  return name != kTwoProjections[0].hf_name && name != kTwoProjections[1].hf_name;
}

// The file's values through the plain reader (core/safetensors.h), as float64.
std::vector<double> file_values(const std::string& name) {
  return read_safetensors(llama_dir() + "/model.safetensors").at(name).to_vector<double>();
}

}  // namespace

TEST(HfCheckpoint, LlamaFolderMatchesItsConfig) {
  HfCheckpoint ckpt(llama_dir());
  nlohmann::json config = nlohmann::json::parse(read_bytes(llama_dir() + "/config.json"));
  ASSERT_EQ(config["model_type"], "llama");
  std::map<std::string, Shape> want = llama_shapes(config);
  std::vector<std::string> names = ckpt.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(ckpt.contains(name)) << name;
    EXPECT_EQ(ckpt.at(name).entry->shape, shape) << name;
    EXPECT_EQ(ckpt.at(name).entry->dtype, kBF16) << name;  // config.json: "dtype": "bfloat16"
  }
  for (const auto& name : names) EXPECT_TRUE(want.count(name)) << "unexpected " << name;
  EXPECT_EQ(ckpt.config().dtype(), kBF16);
  EXPECT_FALSE(ckpt.weights().sharded());
  // The rope fields the Llama mapping reads, in transformers 5's form (Note [Adding a Hugging
  // Face model] in nn/hf_checkpoint.h).
  HfConfig rope = ckpt.config().object("rope_parameters");
  EXPECT_EQ(rope.number("rope_theta"), 500000.0);
  EXPECT_EQ(rope.string("rope_type"), "llama3");
  EXPECT_EQ(rope.integer("original_max_position_embeddings"), 32);
}

TEST(HfCheckpoint, TensorsComeOutConvertedOrAsStored) {
  HfCheckpoint ckpt(llama_dir());
  const std::string name = "model.layers.1.mlp.down_proj.weight";
  Tensor f32 = ckpt.tensor(name, kCPU, kF32);
  EXPECT_EQ(f32.dtype(), kF32);
  EXPECT_EQ(f32.shape(), (Shape{64, 128}));
  EXPECT_EQ(f32.to_vector<double>(), file_values(name));  // bfloat16 widens exactly
  Tensor as_stored = ckpt.tensor(name);
  EXPECT_EQ(as_stored.dtype(), kBF16);
  EXPECT_EQ(as_stored.to_vector<double>(), file_values(name));
  expect_error([&] { ckpt.tensor("model.layers.2.mlp.down_proj.weight"); },
               {llama_dir(), "'model.layers.2.mlp.down_proj.weight'", "21 tensors"});
}

TEST(HfCheckpoint, CopyIntoChecksShapesAndTransposes) {
  HfCheckpoint ckpt(llama_dir());
  const std::string k = "model.layers.0.self_attn.k_proj.weight";  // (32, 64)
  Tensor t = zeros({64, 32}, {.dtype = kF64});
  ckpt.copy_into(k, t, /*transposed=*/true);
  EXPECT_EQ(transpose(t, 0, 1).contiguous().to_vector<double>(), file_values(k));
  expect_error(
      [&] {
        ckpt.copy_into(k, zeros({32, 63}));
      },
      {llama_dir() + "/model.safetensors", "'" + k + "'", "[32, 64]", "[32, 63]"});
  expect_error([&] { ckpt.copy_into(k, zeros({64})); }, {"'" + k + "'", "[32, 64]", "[64]"});
  expect_error([&] { ckpt.copy_into(k, zeros({64}), true); }, {"'" + k + "'", "must be 2-d"});
  expect_error(
      [&] {
        ckpt.copy_into(k, zeros({32, 64}, {.dtype = kI64}));
      },
      {"'" + k + "'", "int64", "between integer and floating-point"});
}

TEST(HfCheckpoint, LoadMapsOntoAModule) {
  HfCheckpoint ckpt(llama_dir());
  auto model = two_projections();
  load_hf_tensors(*model, ckpt, kTwoProjections, ignore_the_rest);
  auto sd = model->state_dict();
  EXPECT_EQ(find(sd, "0.weight")->to_vector<double>(), file_values(kTwoProjections[0].hf_name));
  EXPECT_EQ(find(sd, "1.weight")->to_vector<double>(), file_values(kTwoProjections[1].hf_name));
  EXPECT_EQ(find(sd, "0.weight")->dtype(), kF32);  // the model's dtype
}

TEST(HfCheckpoint, LoadErrors) {
  HfCheckpoint ckpt(llama_dir());
  auto model = two_projections();
  expect_error([&] { load_hf_tensors(*model, ckpt, kTwoProjections); },  // nothing ignored
               {llama_dir() + "/model.safetensors", "'lm_head.weight'", "extra tensor"});
  HfTensorMap one = {kTwoProjections[0]};
  expect_error([&] { load_hf_tensors(*model, ckpt, one, ignore_the_rest); },
               {"'1.weight'", "not in the mapping"});
  HfTensorMap wrong = kTwoProjections;
  wrong[1].loom_name = "2.weight";
  expect_error([&] { load_hf_tensors(*model, ckpt, wrong, ignore_the_rest); },
               {"'2.weight'", "does not have"});
  wrong = kTwoProjections;
  wrong[1].hf_name = "model.layers.0.self_attn.q_proj.bias";
  expect_error([&] { load_hf_tensors(*model, ckpt, wrong, ignore_the_rest); },
               {llama_dir(), "'model.layers.0.self_attn.q_proj.bias'", "missing"});
}

// Each tensor goes from the mapped file into its parameter: the CPU allocator hands out nothing
// the size of a tensor on the way (bfloat16 -> float32 happens in the copy itself).
TEST(HfCheckpoint, LoadingCopiesWithoutAHostBuffer) {
  HfCheckpoint ckpt(llama_dir());
  auto model = two_projections();
  CpuAllocStats before = cpu_alloc_stats();
  reset_cpu_peak();
  load_hf_tensors(*model, ckpt, kTwoProjections, ignore_the_rest);
  EXPECT_LT(cpu_alloc_stats().peak_live_bytes - before.live_bytes, 32u * 64 * 2)
      << "a buffer the size of the smaller (bfloat16) tensor was allocated";
}

TEST(HfCheckpoint, SaveWritesWhatLoads) {
  auto model = two_projections();
  HfCheckpoint src(llama_dir());
  load_hf_tensors(*model, src, kTwoProjections, ignore_the_rest);
  HfTensorMap map = {{"k.weight", "0.weight", /*transposed=*/true}, {"q.weight", "1.weight"}};
  TempDir dir("loom_hf_save");
  save_hf_tensors(*model, map, "{\"model_type\": \"test\"}", dir.path, {.dtype = kBF16});
  HfCheckpoint back(dir.path);
  EXPECT_EQ(back.config().string("model_type"), "test");
  EXPECT_EQ(back.at("k.weight").entry->shape, (Shape{64, 32}));
  EXPECT_EQ(back.at("k.weight").entry->dtype, kBF16);
  EXPECT_EQ(read_safetensors_header(dir.file("model.safetensors")).metadata.at("format"), "pt");
  auto again = two_projections();
  load_hf_tensors(*again, back, map);
  EXPECT_EQ(find(again->state_dict(), "0.weight")->to_vector<double>(),
            file_values(kTwoProjections[0].hf_name));
  EXPECT_EQ(find(again->state_dict(), "1.weight")->to_vector<double>(),
            file_values(kTwoProjections[1].hf_name));
}
