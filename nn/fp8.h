// nn::convert_to_fp8: the pass that makes a model's Linear layers run their products in FP8
// (loom::fp8_linear, torchao's tensorwise recipe: docs/fp8.md), as torchao's
// convert_to_float8_training does. It marks each chosen Linear (Linear::fp8: the same module,
// tensors and state_dict keys; printed with "fp8=tensorwise") and says which it left in bfloat16
// and why. What `--amp fp8` runs on top of bfloat16 autocast.
//
//   auto model = std::make_shared<nn::GPT>(cfg);
//   nn::fuse(*model);                                          // either order works
//   std::cout << nn::fp8_summary(nn::convert_to_fp8(*model)) << "\n";
//
// Leaves out: modules other than Linear (attention's products, convolutions, embeddings and the
// classifier's linear_cross_entropy stay in bfloat16), Linear subclasses that run their own
// forward (the tensor-parallel Linears), undoing the conversion (set Linear::fp8 back).
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

struct Fp8Options {
  // The model's first and last Linear (in forward order: a depth-first walk of the children) stay
  // in bfloat16: the first sees the raw input, the last makes the logits, and both are where FP8's
  // rounding costs the most accuracy for the least time.
  bool skip_first = true, skip_last = true;
};

// One Linear the pass looked at: its dotted path from the model, and why it was left in bfloat16
// (empty when it now runs in FP8).
struct Fp8Choice {
  std::string at, skipped_because;
};

// Marks every Linear of `model` whose in and out features are multiples of 16 (the FP8 GEMMs'
// requirement), but the first and last (options), to run fp8_linear; returns every Linear it
// looked at, in forward order (LoRA adapters are not listed: they stay with their layer's
// precision rules of nn/lora.h, in bfloat16). Modules inside fused modules (nn/fused.h) are
// reached too, so it runs before or after nn::fuse. Call it before wrapping the model in DDP.
std::vector<Fp8Choice> convert_to_fp8(Module& model, const Fp8Options& options = {});

// For a log: "nn::convert_to_fp8: 46 of 48 Linears in FP8 (tensorwise); kept in bf16:
// h.0.attn.c_attn (the model's first Linear), lm_head (the model's last Linear)".
std::string fp8_summary(const std::vector<Fp8Choice>& choices);

}  // namespace loom::nn
