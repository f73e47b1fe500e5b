// LoRA adapters written in the layout Hugging Face's PEFT saves (adapter_model.safetensors and
// adapter_config.json), so `PeftModel.from_pretrained(base, dir)` applies them to the base model
// a Hugging Face folder holds. Leaves out: reading PEFT adapters, and layers the folder stores
// transposed (GPT-2's Conv1D needs PEFT's fan_in_fan_out: refused with the reason).
#pragma once

#include <string>

#include "nn/hf_checkpoint.h"
#include "nn/lora.h"

namespace loom::nn {

// Writes dir/adapter_model.safetensors ("base_model.model.<module>.lora_A.weight" (r, in) and
// ".lora_B.weight" (out rows, r) for each Hugging Face module the adapted Linears map to through
// `map`; a packed Linear's rows split as Note [LoRA] says) and dir/adapter_config.json (peft_type
// LORA, r, lora_alpha, lora_dropout, target_modules, task_type CAUSAL_LM, base_model_name_or_path
// `base`), atomically. `o` is what apply_lora was given. Errors: a model without adapters, an
// adapted Linear the map does not name, a transposed layer.
void save_peft_adapter(const Module& model, const HfTensorMap& map, const LoRAOptions& o,
                       const std::string& dir, const std::string& base = "");

}  // namespace loom::nn
