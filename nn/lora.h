// LoRA (Hu et al., 2021): low-rank adapters on a model's Linear layers, trained while the base
// weights stay frozen, merged into them for export, and saved in the layout Hugging Face's PEFT
// writes (adapter_model.safetensors + adapter_config.json). Leaves out: several adapters per
// layer, adapters on embeddings or convolutions, DoRA/rsLoRA variants, loading PEFT adapters.
#pragma once

#include <string>
#include <vector>

#include "nn/layers.h"

namespace loom::nn {

// Note [LoRA]
// apply_lora gives each targeted Linear (out x in) two children, lora_A (r x in, Kaiming-uniform
// as PEFT) and lora_B (out x r, zeros, so training starts from the base model), and freezes
// every parameter of the model that is not an adapter's (requires_grad false: no gradient is
// made or kept for them, and an optimizer built over lora_parameters() holds state for the
// adapters only). Linear::forward then adds scale * B (A dropout(x)), scale = alpha / r: the
// product B A is never formed. The adapters' names are PEFT's: "<layer>.lora_A.weight" and
// "<layer>.lora_B.weight" under the layer's own name, so state_dict() and checkpoints hold them
// beside the base weights. merge_lora adds scale * B A into each base weight (in float32 or
// wider) and removes the adapters: the merged model computes what the adapted one did (without
// dropout). A packed projection (Llama's c_attn: q, k and v rows; c_fc: gate and up rows) shares
// one A over its row blocks, so its PEFT export gives each of q_proj, k_proj, v_proj that A and
// its rows of B: the same update B A, written as PEFT lays it out.
struct LoRAOptions {
  int64_t rank = 8;      // r
  double alpha = 16.0;   // scale = alpha / r
  double dropout = 0.0;  // on the adapters' input, in training
  // The Linears to adapt: those whose name (the last part of the module path, "c_attn") is in
  // the list; empty: every Linear.
  std::vector<std::string> targets = {"c_attn", "c_proj"};
};

// Adds adapters to the targeted Linears of `model` and freezes everything else (Note [LoRA]);
// returns the adapted modules' paths. Errors: no Linear matched (naming the targets), a Linear
// that already has adapters, rank < 1 or larger than the layer's smaller side, alpha <= 0,
// dropout outside [0, 1).
std::vector<std::string> apply_lora(Module& model, const LoRAOptions& options);

// scale * lora_B(lora_A(dropout(x))) of an adapted Linear: x (..., in) -> (..., out).
Tensor lora_delta(const Linear& layer, const Tensor& x);

// The adapters' parameters (every lora_A and lora_B weight), in module order: what the optimizer
// of a LoRA run holds.
std::vector<Tensor> lora_parameters(const Module& model);

// Adds scale * B A to each adapted Linear's weight, removes its adapters and makes the base
// parameters trainable again; returns how many layers it merged.
int64_t merge_lora(Module& model);

}  // namespace loom::nn
