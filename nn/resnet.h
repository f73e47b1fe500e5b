// ResNet (He et al., 2015) as torchvision writes it (v1.5: a Bottleneck strides in its 3x3
// convolution): BasicBlock and Bottleneck, each conv-BN-ReLU with an identity or a 1x1-projection
// shortcut, and the model (a stem, four stages, global average pooling, a linear head), with
// torchvision's parameter names (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc) so a
// state dict maps 1:1. ResNet-18/34/50 are built by nn/models.h.
// Leaves out: ResNeXt/wide variants (groups, width_per_group), dilation, pretrained weights.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers.h"

namespace loom::nn {

// Every convolution has no bias (a BatchNorm follows it); the shortcut's projection is
// Sequential(Conv2d 1x1 with the block's stride, BatchNorm2d), named downsample.0 and .1, made
// when the stride is not 1 or the channels change, and absent (identity shortcut) otherwise.

// x: (N, in, H, W) -> (N, planes, H/stride, W/stride):
// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), conv1 3x3 with the stride, conv2 3x3.
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;  // out channels = planes * kExpansion
  BasicBlock(int64_t in_channels, int64_t planes, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;
  // The BatchNorm whose weight zero_init_residual zeroes (bn2): the block then starts as
  // relu(shortcut(x)).
  BatchNorm2d& last_bn() { return *bn2; }

  int64_t in_channels, planes, stride;
  ModuleHolder<Conv2d> conv1, conv2;
  ModuleHolder<BatchNorm2d> bn1, bn2;
  ModuleHolder<Sequential> downsample;  // null for the identity shortcut
};

// x: (N, in, H, W) -> (N, 4 planes, H/stride, W/stride): conv1 1x1 (in -> planes), conv2 3x3
// with the stride (planes -> planes), conv3 1x1 (planes -> 4 planes), each followed by its
// BatchNorm; ReLU after bn1 and bn2, and after the shortcut's add.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_channels, int64_t planes, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;
  BatchNorm2d& last_bn() { return *bn3; }  // zeroed by zero_init_residual

  int64_t in_channels, planes, stride;
  ModuleHolder<Conv2d> conv1, conv2, conv3;
  ModuleHolder<BatchNorm2d> bn1, bn2, bn3;
  ModuleHolder<Sequential> downsample;  // null for the identity shortcut
};

enum class ResNetBlock { Basic, Bottleneck };

struct ResNetConfig {
  ResNetBlock block = ResNetBlock::Basic;
  std::array<int64_t, 4> layers = {2, 2, 2, 2};  // blocks per stage (ResNet-18)
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // false: ImageNet's stem, conv1 7x7 stride 2 padding 3, bn1, ReLU, maxpool 3x3 stride 2
  // padding 1 (224 -> 56). true: for 28x28 and 32x32 images, conv1 3x3 stride 1 padding 1 and no
  // max-pool (maxpool is an Identity), so stage 1 sees the full image.
  bool small_stem = false;
  // Zero the weight of each block's last BatchNorm (Goyal et al., 2017), so each block starts as
  // relu(shortcut(x)); torchvision's zero_init_residual.
  bool zero_init_residual = false;

  void check() const;  // errors name the field and its value
};

// x: (N, in_channels, H, W) -> logits (N, num_classes). Stages layer1..layer4 of widths 64, 128,
// 256, 512 (times the block's expansion), the first block of stages 2-4 with stride 2.
class ResNet : public Module {
 public:
  explicit ResNet(ResNetConfig cfg);
  Tensor forward(const Tensor& x) override;
  // torchvision's init: every conv weight ~ kaiming_normal_(fan_out, ReLU), BatchNorm weight 1 and
  // bias 0 (each block's last BatchNorm weight 0 with zero_init_residual); fc keeps Linear's
  // default. The constructor runs it.
  void init_weights();
  int64_t num_parameters() const;

  ResNetConfig config;
  ModuleHolder<Conv2d> conv1;
  ModuleHolder<BatchNorm2d> bn1;
  std::shared_ptr<Module> maxpool;  // MaxPool2d(3, stride 2, padding 1), or Identity (small stem)
  ModuleHolder<Sequential> layer1, layer2, layer3, layer4;  // of BasicBlock or Bottleneck
  ModuleHolder<AdaptiveAvgPool2d> avgpool;
  ModuleHolder<Linear> fc;

 private:
  // A stage of `blocks` blocks of `planes`, the first with `stride`; in_planes_ follows.
  std::shared_ptr<Sequential> make_stage(int64_t planes, int64_t blocks, int64_t stride);
  int64_t in_planes_ = 64;
};

}  // namespace loom::nn
