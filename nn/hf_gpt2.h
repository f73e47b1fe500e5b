// GPT-2 in Hugging Face folders: load_hf_gpt2 builds loom's GPT (nn/gpt.h) from a folder that
// transformers wrote (GPT2LMHeadModel, or GPT2Model as the released gpt2 folders are) and
// save_hf_gpt2 writes one that transformers reads back. The config fields map to GPTConfig, and
// what loom's GPT cannot do is refused naming the field; the tensor names are transformers' with
// the Conv1D weights stored (in, out), the transpose of loom's Linear (docs/huggingface.md).
// Leaves out: tokenizers, GPT2DoubleHeadsModel's heads, and the generic parts (nn/hf_checkpoint.h).
#pragma once

#include <optional>
#include <string>

#include "nn/gpt.h"
#include "nn/hf_checkpoint.h"

namespace loom::nn {

// config.json -> GPTConfig: n_layer, n_head, n_embd, vocab_size, n_positions (-> block_size),
// the three *_pdrop (-> dropout; they must agree). Refused with an error naming the file, the
// field and its value: model_type other than "gpt2", activation_function other than the tanh
// GELU (gelu_new, gelu_pytorch_tanh, gelu_fast), n_inner other than 4 n_embd,
// layer_norm_epsilon other than 1e-5, scale_attn_weights false, scale_attn_by_inverse_layer_idx,
// add_cross_attention, tie_word_embeddings false. `dropout`, when set, replaces the *_pdrop.
GPTConfig gpt2_config_from_hf(const HfConfig& c, std::optional<double> dropout = std::nullopt);

// The config.json transformers writes for GPT2LMHeadModel with these sizes, its dtype `dtype`.
std::string hf_gpt2_config_json(const GPTConfig& c, DType dtype);

// One entry per tensor of GPT(cfg).state_dict(): "<prefix>wte.weight" ... "<prefix>ln_f.bias",
// the attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj weights transposed. The prefix is
// "transformer." for GPT2LMHeadModel and "" for GPT2Model.
HfTensorMap hf_gpt2_tensor_map(const GPTConfig& cfg, const std::string& prefix = "transformer.");

struct HfGpt2LoadOptions {
  DType dtype = kF32;  // the model's parameters, whatever the file's dtype
  std::optional<double> dropout = std::nullopt;  // instead of config.json's *_pdrop
};

// A new GPT on `device` with the folder's weights: gpt2_config_from_hf, GPT(config) moved to the
// device and dtype, then load_hf_gpt2_into.
ModuleHolder<GPT> load_hf_gpt2(const std::string& dir, Device device = kCPU,
                               const HfGpt2LoadOptions& options = {});
// The checkpoint's weights into an existing GPT of the same sizes (its device and dtype), through
// load_hf_tensors (every error of it). Names with or without "transformer."; the attn.bias /
// attn.masked_bias buffers of older transformers and a tied lm_head.weight are ignored.
void load_hf_gpt2_into(GPT& model, const HfCheckpoint& ckpt);

// Writes config.json and the weights as GPT2LMHeadModel's save_pretrained does (no lm_head.weight:
// it is tied), in options.dtype or the parameters' own dtype.
void save_hf_gpt2(const GPT& model, const std::string& dir, const HfSaveOptions& options = {});

}  // namespace loom::nn
