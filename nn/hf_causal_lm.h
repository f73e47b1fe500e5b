// The decoder language model of a Hugging Face folder, whichever of loom's it is: model_type
// "gpt2" (nn/hf_gpt2.h) or a Llama-shaped one, "llama", "mistral", "qwen2" or "phi3"
// (nn/hf_llama.h), and the ids its generation_config.json stops at, and a PEFT LoRA adapter merged
// into it. What a program that only runs a folder needs (examples/generate.cpp). Leaves out:
// training (train/language_model.h) and encoder models (BERT: nn/hf_bert.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "nn/causal_lm.h"

namespace loom::nn {

// The folder's model, made in place on `device` in `dtype` (whatever the files' dtype). A
// model_type loom has no model for is an error naming it and the ones it has.
std::shared_ptr<CausalLM> load_hf_causal_lm(const std::string& dir, Device device = kCPU,
                                            DType dtype = kF32);

// generation_config.json's eos_token_id (one id or a list): the ids transformers' generate stops
// at. Empty when the file or the field is absent.
std::vector<int64_t> hf_stop_tokens(const std::string& dir);

// The PEFT adapter in `adapter_dir` merged into `model`, loaded from `model_dir`
// (merge_peft_adapter with that folder's Hugging Face names); returns the modules merged. GPT-2 is
// refused (its Conv1D layers are transposed).
int64_t merge_hf_adapter(CausalLM& model, const std::string& model_dir,
                         const std::string& adapter_dir);

}  // namespace loom::nn
