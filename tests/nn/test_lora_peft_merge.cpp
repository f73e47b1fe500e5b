// merge_peft_adapter (nn/lora_peft.h): a PEFT adapter made by PEFT itself on the Llama fixture
// (scripts/make-hf-fixtures.py --only llama-lora) merged into the loaded base gives PEFT's logits;
// an adapter loom saved merges back into the model it came from; use_rslora's scale; each refusal
// names the file and the field or tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "autograd/ops/ops.h"
#include "nn/hf_llama.h"
#include "nn/lora_peft.h"
#include "nn/serialize.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using loom::test::hf_fixture;
using loom::test::read_bytes;
using loom::test::relative_error;
using loom::test::TempDir;
namespace fs = std::filesystem;

namespace {

// The fixture adapter copied to `dir`, its config with `from` replaced by `to`.
void copy_adapter(const TempDir& dir, const std::string& from = "", const std::string& to = "") {
  std::string config = read_bytes(hf_fixture("llama-lora/adapter_config.json"));
  if (!from.empty()) {
    ASSERT_NE(config.find(from), std::string::npos) << from;
    config.replace(config.find(from), from.size(), to);
  }
  test::write_bytes(dir.file("adapter_config.json"), config);
  fs::copy_file(hf_fixture("llama-lora/adapter_model.safetensors"),
                dir.file("adapter_model.safetensors"));
}

}  // namespace

TEST(LoRAPeftMerge, PeftsAdapterMergedGivesPeftsLogits) {
  const test::GoldenFile g = test::read_golden_file(hf_fixture("llama-lora.txt"));
  auto model = load_hf_llama(hf_fixture("llama"));
  model->eval();
  const Tensor ids = g.at("ids").to(kI64);
  const double before = relative_error(model->forward(ids), g.at("logits"));
  EXPECT_GT(before, 1e-2);  // the adapter changes the logits
  // q, v, o and down projections of 2 layers.
  EXPECT_EQ(
      merge_peft_adapter(*model, hf_llama_tensor_map(model->config), hf_fixture("llama-lora")), 8);
  EXPECT_LT(relative_error(model->forward(ids), g.at("logits")), 1e-5);
}

// Loom's packed c_attn and c_fc adapters, saved in PEFT's layout (one A per module, B's rows) and
// merged into a fresh copy of the base, give the adapted model's outputs (in float64: W x + s B A x
// and (W + s B A) x round apart by 1e-5 in float32).
TEST(LoRAPeftMerge, AnAdapterLoomSavedMergesBackIntoItsBase) {
  auto make = [] {
    manual_seed(3);
    auto m = std::make_shared<Llama>(LlamaConfig::preset("tiny"));
    m->to(kF64);
    return m;
  };
  auto adapted = make();
  const LoRAOptions o{.rank = 2, .alpha = 6, .targets = {"c_attn", "c_proj", "c_fc"}};
  apply_lora(*adapted, o);
  for (Tensor p : lora_parameters(*adapted)) {
    NoGradGuard g;
    p.copy_(randn(p.shape()) * 0.3);
  }
  adapted->eval();
  const Tensor ids = randint(0, 96, {2, 7});
  const Tensor want = adapted->forward(ids);
  TempDir dir("loom_peft_roundtrip");
  save_peft_adapter(*adapted, hf_llama_tensor_map(adapted->config), o, dir.path);
  auto base = make();
  base->eval();
  merge_peft_adapter(*base, hf_llama_tensor_map(base->config), dir.path);
  EXPECT_LT(relative_error(base->forward(ids), want), 1e-12);
}

// use_rslora scales by alpha / sqrt(r) instead of alpha / r: the update is sqrt(4) = 2 times.
TEST(LoRAPeftMerge, RsLoraScalesBySqrtR) {
  auto delta = [](const std::string& to) {
    TempDir dir("loom_peft_rslora");
    copy_adapter(dir, "\"use_rslora\": false", to);
    auto model = load_hf_llama(hf_fixture("llama"));
    auto qkv = [&] {  // layer 0's q, k and v rows; the adapter has q_proj and v_proj
      for (const auto& [name, p] : model->named_parameters())
        if (name == "layers.0.attn.c_attn.weight") return p.clone();
      return Tensor();
    };
    const Tensor before = qkv();
    merge_peft_adapter(*model, hf_llama_tensor_map(model->config), dir.path);
    return qkv() - before;
  };
  const Tensor plain = delta("\"use_rslora\": false"), rs = delta("\"use_rslora\": true");
  EXPECT_GT(max(abs(plain)).item(), 0.0);
  EXPECT_LT(relative_error(rs, plain * 2.0), 1e-6);
}

TEST(LoRAPeftMerge, RefusalsNameTheFileAndTheField) {
  struct Case {
    std::string from, to, message;
  };
  const std::vector<Case> cases = {
      {"\"use_dora\": false", "\"use_dora\": true", "field \"use_dora\" is true"},
      {"\"bias\": \"none\"", "\"bias\": \"all\"", "field \"bias\" is \"all\""},
      {"\"rank_pattern\": {}", "\"rank_pattern\": {\"q_proj\": 8}", "field \"rank_pattern\""},
      {"\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]",
       "field \"modules_to_save\""},
      {"\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"", "field \"peft_type\" is \"IA3\""},
      {"\"r\": 4", "\"r\": 3", "has rank 4, but r is 3"},
  };
  for (const Case& c : cases) {
    TempDir dir("loom_peft_bad");
    copy_adapter(dir, c.from, c.to);
    auto model = load_hf_llama(hf_fixture("llama"));
    const std::string e = test::error_of(
        [&] { merge_peft_adapter(*model, hf_llama_tensor_map(model->config), dir.path); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.to << ": " << e;
    EXPECT_NE(e.find(dir.path), std::string::npos) << c.to << ": " << e;
  }
  // A module the model's layout does not have.
  TempDir dir("loom_peft_unknown");
  copy_adapter(dir);
  NamedTensors t = load_safetensors(dir.file("adapter_model.safetensors")).tensors;
  t.emplace_back("base_model.model.model.layers.9.mlp.up_proj.lora_A.weight", zeros({4, 64}));
  save_safetensors(dir.file("adapter_model.safetensors"), t);
  auto model = load_hf_llama(hf_fixture("llama"));
  const std::string e = test::error_of(
      [&] { merge_peft_adapter(*model, hf_llama_tensor_map(model->config), dir.path); });
  EXPECT_NE(e.find("the adapter's module model.layers.9.mlp.up_proj is no weight"),
            std::string::npos)
      << e;
}
