// LoRA adapters in the layout Hugging Face's PEFT saves (adapter_model.safetensors and
// adapter_config.json): written, so `PeftModel.from_pretrained(base, dir)` applies them to the base
// model a Hugging Face folder holds; and read, merged into a loaded base model as PEFT's
// merge_and_unload does. Leaves out: reading adapters back as trainable adapters (a PEFT adapter
// has one A per Hugging Face module, loom's packed c_attn one A for q, k and v: merged, they are
// the same model), DoRA and other PEFT methods, and layers the folder stores transposed (GPT-2's
// Conv1D needs PEFT's fan_in_fan_out: refused with the reason).
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

// Reads the PEFT adapter in `dir` and adds scale * B A of each of its modules into the rows of
// the loom weight `map` gives that module (computed in float32 or wider), scale = lora_alpha / r
// (lora_alpha / sqrt(r) with use_rslora); returns the modules merged. The model then computes what
// PEFT's adapted model does. Errors name the file and the field or tensor: peft_type other than
// LORA, use_dora, fan_in_fan_out, bias other than "none", rank_pattern, alpha_pattern or
// modules_to_save (weights PEFT trains whole), a module the map does not know, an A without its B,
// shapes that do not fit the weight's rows.
int64_t merge_peft_adapter(Module& model, const HfTensorMap& map, const std::string& dir);

}  // namespace loom::nn
