// nn::fuse's transformer step: in a model whose trunk is a TransformerStack followed by a final
// norm (GPT's h and ln_f, the Vision Transformer's blocks and norm), the stack becomes a
// FusedTransformerStack of FusedTransformerBlocks and the norm a FusedAddLayerNorm
// (nn/fused_transformer.h). nn::fuse runs it on every GPT and VisionTransformer it walks through;
// a model of one's own names its stack and norm (docs/adding-a-model.md).
//
//   auto gpt = std::make_shared<nn::GPT>(cfg);
//   nn::fuse(*gpt);                          // or nn::fuse_transformer(*gpt): this step alone
//   nn::fuse_transformer(*lm, lm->blocks, lm->norm);  // any model: its two members
//
// Leaves out: the Sequential patterns (nn/fuse.cpp) and unfusing.
#pragma once

#include <vector>

#include "nn/fuse.h"
#include "nn/gpt.h"
#include "nn/vit.h"

namespace loom::nn {

// Fuses `stack` and `final_norm`, two children of `model` that the model's forward runs as
// stack->forward(x, *final_norm): puts the fused modules in their places among model's children
// and in the two holders (the model's members). Nothing when the stack is already fused or a block
// has a norm other than LayerNorm or is post-norm (BERT); the final norm only when it is a
// LayerNorm. Returns the fusions, their paths relative to `model`: the stack, each block, the
// final norm. Keys, parameter order and tensors stay the same (Note [Fused modules keep the
// unfused keys] in nn/fused.h). Call it before DDP or FSDP wrap the model.
std::vector<Fusion> fuse_transformer(Module& model, ModuleHolder<TransformerStack>& stack,
                                     ModuleHolder<Module>& final_norm);
// The model's stack and final norm: GPT's h and ln_f; the Vision Transformer's blocks and norm.
std::vector<Fusion> fuse_transformer(GPT& model);
std::vector<Fusion> fuse_transformer(VisionTransformer& model);
// fuse_transformer(m) when m is a GPT or a VisionTransformer; else nothing. nn::fuse calls it on
// every module it walks.
std::vector<Fusion> fuse_transformer_model(Module& m);

}  // namespace loom::nn
