// PEFT's adapter layout: see lora_peft.h.
#include "nn/lora_peft.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/ops/ops.h"
#include "core/atomic_file.h"
#include "nn/hf_config.h"
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

namespace {

// adapter_config.json's scale, after refusing what a plain LoRA merge cannot do.
double peft_scale(const HfConfig& c) {
  LOOM_CHECK(c.string("peft_type", "LORA") == "LORA", c.where("peft_type"),
             "; merge_peft_adapter reads LoRA adapters");
  for (const char* key : {"use_dora", "fan_in_fan_out", "lora_bias"})
    LOOM_CHECK(!c.boolean(key, false), c.where(key), "; merge_peft_adapter merges plain LoRA");
  LOOM_CHECK(c.string("bias", "none") == "none", c.where("bias"),
             "; merge_peft_adapter merges adapters without trained biases");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    LOOM_CHECK(!c.has(key) || c.text(key) == "{}", c.where(key),
               "; merge_peft_adapter takes one r and lora_alpha for every module");
  LOOM_CHECK(!c.has("modules_to_save"), c.where("modules_to_save"),
             "; whole weights trained beside the adapters are not merged");
  const double r = double(c.integer("r")), alpha = c.number("lora_alpha");
  return c.boolean("use_rslora", false) ? alpha / std::sqrt(r) : alpha / r;
}

// The map's entry for the Hugging Face module `module` ("model.layers.0.self_attn.q_proj").
const HfTensor& entry_of(const HfTensorMap& map, const std::string& module,
                         const std::string& file) {
  for (const HfTensor& e : map)
    if (e.hf_name == module + ".weight") {
      LOOM_CHECK(!e.transposed, "merge_peft_adapter: ", file, ": ", module,
                 " is stored transposed (a Conv1D), which loom does not merge");
      return e;
    }
  LOOM_FAIL("merge_peft_adapter: ", file, ": the adapter's module ", module,
            " is no weight of this model's Hugging Face layout");
}

// weight[rows] += scale * B A, in float32 or wider.
void merge_into(Tensor& weight, const HfTensor& e, const Tensor& a, const Tensor& b, double scale,
                const std::string& module) {
  const int64_t rows = e.rows < 0 ? weight.size(0) : e.rows;
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2 && b.size(1) == a.size(0) && b.size(0) == rows &&
                 a.size(1) == weight.size(1),
             "merge_peft_adapter: ", module, ": lora_A ", a.shape(), " and lora_B ", b.shape(),
             " do not make an update of its ", rows, " x ", weight.size(1), " weight");
  const DType wide = weight.dtype() == kF64 ? kF64 : kF32;
  NoGradGuard no_grad;
  Tensor part = weight.slice(0, e.row_start, e.row_start + rows);
  Tensor delta = matmul(b.to(wide).to(weight.device()), a.to(wide).to(weight.device())) * scale;
  part.copy_((part.to(wide) + delta).to(weight.dtype()));
}

}  // namespace

int64_t merge_peft_adapter(Module& model, const HfTensorMap& map, const std::string& dir) {
  const HfConfig config = HfConfig::read(dir + "/adapter_config.json");
  const double scale = peft_scale(config);
  const int64_t r = config.integer("r");
  const std::string file = dir + "/adapter_model.safetensors";
  const SafetensorsFile adapter = load_safetensors(file);
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model.named_parameters()) params[name] = p;
  const std::string prefix = "base_model.model.", a_suffix = ".lora_A.weight";
  int64_t merged = 0;
  for (const auto& [name, a] : adapter.tensors) {
    if (name.ends_with(".lora_B.weight")) continue;  // taken with its A
    LOOM_CHECK(name.starts_with(prefix) && name.ends_with(a_suffix), "merge_peft_adapter: ", file,
               ": tensor ", name, " is not a LoRA A or B under ", prefix);
    const std::string module =
        name.substr(prefix.size(), name.size() - prefix.size() - a_suffix.size());
    const HfTensor& e = entry_of(map, module, file);
    LOOM_CHECK(a.dim() == 2 && a.size(0) == r, "merge_peft_adapter: ", file, ": ", name,
               " has rank ", a.dim() == 2 ? a.size(0) : -1, ", but r is ", r,
               " (adapter_config.json)");
    LOOM_CHECK(params.count(e.loom_name), "merge_peft_adapter: the model has no ", e.loom_name);
    merge_into(params.at(e.loom_name), e, a, adapter.at(prefix + module + ".lora_B.weight"), scale,
               module);
    ++merged;
  }
  LOOM_CHECK(merged > 0, "merge_peft_adapter: ", file, " holds no LoRA adapter");
  return merged;
}

}  // namespace loom::nn
