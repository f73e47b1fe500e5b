// load_hf_causal_lm and hf_stop_tokens (nn/hf_causal_lm.h): config.json's model_type picks the
// loader. Leaves out: every mapping itself (nn/hf_gpt2.cpp, nn/hf_llama.cpp).
#include "nn/hf_causal_lm.h"

#include <filesystem>

#include "core/error.h"
#include "nn/hf_config.h"
#include "nn/hf_gpt2.h"
#include "nn/hf_llama.h"
#include "nn/lora_peft.h"

namespace loom::nn {

std::shared_ptr<CausalLM> load_hf_causal_lm(const std::string& dir, Device device, DType dtype) {
  const HfConfig config = HfConfig::read((std::filesystem::path(dir) / "config.json").string());
  const std::string type = config.string("model_type", "gpt2");
  if (type == "gpt2") return load_hf_gpt2(dir, device, {.dtype = dtype});
  if (is_llama_family(type)) return load_hf_llama(dir, device, dtype);  // nn/hf_llama.h's Notes
  LOOM_FAIL(config.where("model_type"),
            "; loom runs gpt2, llama, mistral, qwen2 and phi3 folders as language models");
}

std::vector<int64_t> hf_stop_tokens(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (!std::filesystem::exists(path)) return {};
  const HfConfig g = HfConfig::read(path);
  return g.has("eos_token_id") ? g.integers("eos_token_id") : std::vector<int64_t>{};
}

int64_t merge_hf_adapter(CausalLM& model, const std::string& model_dir,
                         const std::string& adapter_dir) {
  auto* llama = dynamic_cast<Llama*>(&model);
  LOOM_CHECK(llama != nullptr, "merge_hf_adapter: ", adapter_dir,
             ": loom merges PEFT adapters into Llama-shaped models (llama, mistral, qwen2, phi3), "
             "not ",
             model.type_name(), " (GPT-2's Conv1D layers are stored transposed)");
  const HfConfig config =
      HfConfig::read((std::filesystem::path(model_dir) / "config.json").string());
  const std::string type = config.string("model_type", "llama");  // its names for the modules
  return merge_peft_adapter(*llama, hf_llama_tensor_map(llama->config, type), adapter_dir);
}

}  // namespace loom::nn
