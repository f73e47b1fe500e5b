// nn::fuse: the one step that puts fused modules (nn/fused.h) into a model. It walks the model,
// and in every Sequential replaces each run of children that matches a pattern of its table
// (nn/fuse.cpp: Linear + ReLU, BatchNorm2d + ReLU, BatchNorm2d + ReLU + MaxPool2d(2)) by the
// fused module of that pattern; in every GPT and VisionTransformer it swaps in the fused
// transformer blocks (nn/fuse_transformer.h). Without it a model runs every layer's own forward.
//
//   auto model = nn::make_cnn();
//   auto fused = nn::fuse(*model);                 // before DDP and before printing
//   std::cout << nn::fusion_summary(fused) << "\n" << *model << "\n";
//
// Leaves out: fusions inside a module's own forward (a ResNet block calls the fused op itself),
// and undoing a fusion.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

// One fusion: the child at dotted path `at` (from the model: "features.1") became a `fused`
// module; the children at `absorbed` became Identity.
struct Fusion {
  std::string at, fused;
  std::vector<std::string> absorbed;
};

// Fuses every run of children that matches a pattern, in every Sequential of `model` (the model
// itself or any module below it), left to right, the longest pattern first, and the trunk of
// every GPT and VisionTransformer (fuse_transformer_model). Returns what it
// fused, in walk order; a second call finds nothing more. Keys, parameter order and tensors stay
// the same (Note [Fused modules keep the unfused keys] in nn/fused.h). Call it before wrapping
// the model in DistributedDataParallel, which copies the list of children when it is made.
std::vector<Fusion> fuse(Module& model);

// One line for a log: "nn::fuse: 2 fusions: 1 LinearReLU (+ 2), 3 LinearReLU (+ 4)" (a fusion
// that absorbed nothing without the parentheses: "h FusedTransformerStack"), or
// "nn::fuse: nothing to fuse".
std::string fusion_summary(const std::vector<Fusion>& fusions);

}  // namespace loom::nn
