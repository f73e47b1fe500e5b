// save_peft_adapter (nn/lora_peft.h) on the tiny Llama with adapters on every projection: the
// file holds PEFT's names, one lora_A and lora_B per Hugging Face module, and for each module
// W + (alpha / r) B A equals that module's rows of the weight merge_lora makes; the config names
// r, alpha and the target modules; the errors. Leaves out: loading the adapters with PEFT itself
// (no torch in CI).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "autograd/ops/ops.h"
#include "nn/hf_llama.h"
#include "nn/llama.h"
#include "nn/lora_peft.h"
#include "nn/serialize.h"
#include "support/errors.h"
#include "support/temp_files.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::nn;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(LoRAPeft, TheAdapterFileHoldsEachModulesUpdate) {
  manual_seed(7);
  Llama m(LlamaConfig::preset("tiny"));
  const LoRAOptions o{.rank = 2, .alpha = 6, .targets = {"c_attn", "c_proj", "c_fc"}};
  apply_lora(m, o);
  for (Tensor p : lora_parameters(m)) {
    NoGradGuard g;
    p.copy_(randn(p.shape()) * 0.1);
  }
  test::TempDir dir;
  save_peft_adapter(m, hf_llama_tensor_map(m.config), o, dir.path, "tiny-llama");
  const std::string cfg = read_text(dir.file("adapter_config.json"));
  for (const char* part : {"\"peft_type\": \"LORA\"", "\"r\": 2", "\"lora_alpha\": 6.0",
                           "\"q_proj\"", "\"gate_proj\"", "\"down_proj\"", "\"tiny-llama\""})
    EXPECT_NE(cfg.find(part), std::string::npos) << part << "\n" << cfg;

  auto file = load_safetensors(dir.file("adapter_model.safetensors"));
  EXPECT_EQ(file.tensors.size(), 2u * 2u * 7u);  // 2 layers x 7 modules x (A, B)
  std::map<std::string, Tensor> got(file.tensors.begin(), file.tensors.end());
  // The base model's weights by Hugging Face name, before and after merging.
  const HfTensorMap map = hf_llama_tensor_map(m.config);
  auto rows_of = [&](const Module& model, const HfTensor& e) {
    for (auto& [k, t] : model.state_dict())
      if (k == e.loom_name)
        return e.rows < 0 ? t.clone() : t.slice(0, e.row_start, e.row_start + e.rows).clone();
    ADD_FAILURE() << e.loom_name;
    return Tensor();
  };
  std::map<std::string, Tensor> base;
  for (const HfTensor& e : map) base[e.hf_name] = rows_of(m, e);
  merge_lora(m);
  int checked = 0;
  for (const HfTensor& e : map) {
    const std::string mod = e.hf_name.substr(0, e.hf_name.size() - 7);  // less ".weight"
    auto a = got.find("base_model.model." + mod + ".lora_A.weight");
    if (a == got.end()) continue;  // not adapted: the norms, the embedding, the head
    const Tensor& b = got.at("base_model.model." + mod + ".lora_B.weight");
    Tensor want = rows_of(m, e), from_file = base[e.hf_name] + matmul(b, a->second) * 3.0;
    EXPECT_LE(max(abs(from_file - want)).item(), 1e-6) << mod;
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

TEST(LoRAPeft, Errors) {
  Llama m(LlamaConfig::preset("tiny"));
  test::TempDir dir;
  EXPECT_NE(error_of([&] {
              save_peft_adapter(m, hf_llama_tensor_map(m.config), {}, dir.path);
            }).find("has no LoRA adapters"),
            std::string::npos);
  apply_lora(m, {.rank = 2, .targets = {"c_attn"}});
  EXPECT_NE(error_of([&] {
              save_peft_adapter(m, {}, {}, dir.path);
            }).find("no Hugging Face tensor is mapped to layers.0.attn.c_attn.weight"),
            std::string::npos);
}
