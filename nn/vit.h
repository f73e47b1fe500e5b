// The Vision Transformer (Dosovitskiy et al., 2020): the image cut into patches by a strided
// convolution, a class token and learned position embeddings, pre-norm transformer blocks
// (nn/transformer.h) without the causal mask and with the exact (erf) GELU, a final LayerNorm, and
// a linear head on the class token. The model is plain: nn::fuse (nn/fuse.h) swaps in the fused
// blocks that training programs run. Parameter names: patch_embed.proj.weight, cls_token,
// pos_embed, blocks.0.ln_1.weight, blocks.0.attn.c_attn.weight, ..., norm.weight, head.weight.
// Leaves out: loading released weights (timm and torchvision name the block's tensors otherwise),
// the pre-logits layer, distillation tokens, stochastic depth, resizing the position table.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/layers.h"
#include "nn/transformer.h"

namespace loom::nn {

struct ViTConfig {
  int64_t image_size = 224;  // square images: image_size x image_size
  int64_t patch_size = 16;   // image_size must be a multiple of it
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;  // C; the MLP is 4C wide (ViT-B's 3072)
  double dropout = 0.0;  // after the embeddings, on the attention weights, after each branch
  double ln_eps = 1e-6;  // every LayerNorm, as torchvision and timm

  // ViT-B/16: 224x224x3, patch 16 (196 patches), 12 layers, 768 wide, 12 heads, MLP 3072,
  // 1000 classes: 86,567,656 parameters.
  static ViTConfig vit_b16();
  // For Fashion-MNIST: 28x28x1, patch 4 (49 patches) or 7 (16), 6 layers, 128 wide, 4 heads,
  // 10 classes.
  static ViTConfig fashion_mnist(int64_t patch_size = 4);

  int64_t num_patches() const;  // (image_size / patch_size)^2
  // The blocks': non-causal, LayerNorm (ln_eps), the exact GELU, MLP 4C wide, biases.
  TransformerConfig block_config() const;
  void check() const;  // errors name the field and its value
};

// x: (B, in, H, W) -> (B, N, C) with N = (H / p) (W / p): Conv2d(in, C, p, stride p) (proj), the
// patches in row-major order.
class PatchEmbedding : public Module {
 public:
  PatchEmbedding(int64_t in_channels, int64_t n_embd, int64_t patch_size);
  Tensor forward(const Tensor& x) override;

  int64_t patch_size;
  ModuleHolder<Conv2d> proj;
};

// x: (B, in_channels, image_size, image_size) -> logits (B, num_classes).
class VisionTransformer : public Module {
 public:
  explicit VisionTransformer(ViTConfig cfg);
  Tensor forward(const Tensor& x) override;
  // The tokens after the final LayerNorm: (B, 1 + N, C), the class token first.
  Tensor features(const Tensor& x);
  // torchvision's init, with normal for its truncated normal: patch_embed.proj.weight ~
  // N(0, 1 / fan_in), pos_embed ~ N(0, 0.02), cls_token 0, the blocks' Linear weights
  // xavier_uniform_, every bias 0, LayerNorms 1 and 0, head 0. The constructor runs it.
  void init_weights();
  int64_t num_parameters() const;
  // Activation checkpointing per transformer block, as GPT::set_activation_checkpointing.
  void set_activation_checkpointing(bool on) { blocks->checkpointing = on; }

  ViTConfig config;
  ModuleHolder<PatchEmbedding> patch_embed;
  Tensor cls_token;  // (1, 1, C)
  Tensor pos_embed;  // (1, 1 + N, C), the class token's position first
  ModuleHolder<Dropout> drop;
  ModuleHolder<TransformerStack> blocks;  // n_layer TransformerBlocks (non-causal), blocks.0, ...
  ModuleHolder<Module> norm;              // make_norm: a LayerNorm
  ModuleHolder<Linear> head;
};

}  // namespace loom::nn
