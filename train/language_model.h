// LanguageModel: the decoder-only model a language-model run trains, GPT-2's architecture or
// Llama's, made from a preset, flags or a Hugging Face folder, behind what the run needs of it:
// the module (a CausalLM: forward, loss, generation), its name for the log, FLOPs per token for
// MFU, activation checkpointing and writing it back as a Hugging Face folder. Used by
// examples/train_gpt.cpp. Leaves out: the training itself and encoder models (BERT).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "distributed/memory_plan.h"
#include "nn/causal_lm.h"
#include "nn/lora.h"

namespace loom::train {

struct LanguageModelSpec {
  std::string arch = "gpt2";  // gpt2 or llama; a --init-from folder's model_type wins
  // gpt2: mini (4 x 128), d12, d24, d36, d48; llama: tiny, llama3.2-1b, llama3.2-3b, llama3-8b.
  std::string preset = "mini";
  int64_t n_layer = 0, n_head = 0, n_embd = 0;  // override the preset's (0: keep)
  int64_t n_kv_head = 0, ffn_hidden = 0;  // Llama's key/value heads and SwiGLU width (0: keep)
  int64_t vocab_size = 256;  // the data's; the model's vocabulary (a folder's must hold it)
  int64_t seq_len = 128;     // the training windows; the model's context must hold them
  std::string init_from{};   // a Hugging Face folder (config.json + safetensors): sizes, weights
};

struct LanguageModel {
  std::shared_ptr<nn::CausalLM> net;
  std::string title;                               // "GPT 4x128 (818944 parameters)"
  std::function<double(int64_t)> flops_per_token;  // training FLOPs at context T
  std::function<void(bool)> set_activation_checkpointing;
  std::function<void(const std::string&)> save_hf;  // the folder transformers reads
  // The LoRA adapters alone, as PEFT saves them (nn/lora_peft.h); GPT-2's Conv1D is refused.
  std::function<void(const std::string&, const nn::LoRAOptions&)> save_adapter;
};

// Errors name the flag: an unknown arch or preset, a folder whose positions are fewer than
// seq_len or whose vocabulary cannot hold the data's ids.
LanguageModel make_language_model(const LanguageModelSpec& spec);

// The sizes of the spec's model for the memory plan (distributed/memory_plan.h), without building
// it: train_gpt --plan-only. A vocab_size of 0 keeps the preset's vocabulary.
distributed::ModelShape model_shape(const LanguageModelSpec& spec);

}  // namespace loom::train
