// PEFT's adapter layout: see lora_peft.h.
#include "nn/lora_peft.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/ops/ops.h"
#include "core/atomic_file.h"
#include "nn/serialize.h"

namespace loom::nn {

namespace {

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj".
std::string module_of(const std::string& hf_name) {
  LOOM_CHECK(hf_name.size() > 7 && hf_name.ends_with(".weight"), "save_peft_adapter: ", hf_name,
             " is not a weight");
  return hf_name.substr(0, hf_name.size() - 7);
}

// The adapters of `layer` (loom path `path`) under each Hugging Face module `map` gives it.
void add_adapter_tensors(const Linear& layer, const std::string& path, const HfTensorMap& map,
                         NamedTensors& out, std::set<std::string>& targets) {
  bool found = false;
  for (const HfTensor& e : map) {
    if (e.loom_name != path + ".weight") continue;
    LOOM_CHECK(!e.transposed, "save_peft_adapter: ", e.hf_name,
               " is stored transposed (a "
               "Conv1D); PEFT writes those with fan_in_fan_out, which loom does not");
    found = true;
    const std::string m = "base_model.model." + module_of(e.hf_name);
    const int64_t rows = e.rows < 0 ? layer.out_features : e.rows;
    out.emplace_back(m + ".lora_A.weight", layer.lora_A->weight.detach());
    out.emplace_back(m + ".lora_B.weight",
                     layer.lora_B->weight.detach().slice(0, e.row_start, e.row_start + rows));
    const std::string mod = module_of(e.hf_name);
    targets.insert(mod.substr(mod.rfind('.') + 1));
  }
  LOOM_CHECK(found, "save_peft_adapter: no Hugging Face tensor is mapped to ", path, ".weight");
}

std::string config_json(const LoRAOptions& o, const std::set<std::string>& targets,
                        const std::string& base) {
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"r", o.rank},
                      {"lora_alpha", o.alpha},
                      {"lora_dropout", o.dropout},
                      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"base_model_name_or_path", base}};
  return j.dump(2) + "\n";
}

}  // namespace

void save_peft_adapter(const Module& model, const HfTensorMap& map, const LoRAOptions& o,
                       const std::string& dir, const std::string& base) {
  NamedTensors tensors;
  std::set<std::string> targets;
  for (const auto& [path, m] : model.named_modules())
    if (auto* l = dynamic_cast<const Linear*>(m.get()); l && l->lora_A)
      add_adapter_tensors(*l, path, map, tensors, targets);
  LOOM_CHECK(!tensors.empty(), "save_peft_adapter: ", model.type_name(),
             " has no LoRA adapters (apply_lora first)");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LOOM_CHECK(!ec, "save_peft_adapter: cannot create ", dir, ": ", ec.message());
  save_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  const std::string json = config_json(o, targets, base);
  AtomicFileWriter w(dir + "/adapter_config.json");
  w.write(json.data(), json.size());
  w.commit();
}

}  // namespace loom::nn
