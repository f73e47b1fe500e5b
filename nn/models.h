// The reference models of docs/workloads.md, shared by the example programs and the
// benchmarks so both train exactly the same networks, and the standard image models built from
// nn/resnet.h and nn/vit.h: ResNet-18/34/50, ViT-B/16 and a small ViT for Fashion-MNIST.
// Leaves out: the blocks themselves (nn/resnet.h, nn/vit.h), pretrained weights.
#pragma once

#include <memory>

#include "nn/layers.h"
#include "nn/resnet.h"
#include "nn/vit.h"

namespace loom::nn {

// mlp: Flatten, Linear(784, 1024), ReLU, Linear(1024, 1024), ReLU, Linear(1024, 10).
std::shared_ptr<Sequential> make_mlp(int64_t hidden = 1024, int64_t classes = 10);

// cnn: [Conv2d(1,32,3,pad 1,no bias), BatchNorm2d, ReLU], [Conv2d(32,64,3,pad 1,no bias),
// BatchNorm2d, ReLU], MaxPool2d(2), [Conv2d(64,128,3,pad 1,no bias), BatchNorm2d, ReLU],
// MaxPool2d(2), AdaptiveAvgPool2d(1), Flatten, Linear(128, 10).
std::shared_ptr<Sequential> make_cnn(int64_t classes = 10);

// wide: Flatten, Linear(784, 4096), ReLU, 7 x [Linear(4096, 4096), ReLU], Linear(4096, 10).
std::shared_ptr<Sequential> make_wide(int64_t classes = 10);

// What the ResNet constructors leave to the caller (nn/resnet.h, ResNetConfig).
struct ResNetOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  bool small_stem = false;          // 3x3 stride-1 first convolution and no max-pool (28x28, 32x32)
  bool zero_init_residual = false;  // each block's last BatchNorm weight 0
};

// ResNet-18: BasicBlock stages of 2, 2, 2, 2 blocks (11,689,512 parameters with 1000 classes and
// the ImageNet stem). ResNet-34: BasicBlock, 3, 4, 6, 3 (21,797,672). ResNet-50: Bottleneck,
// 3, 4, 6, 3 (25,557,032). x: (N, in_channels, H, W) -> (N, num_classes).
std::shared_ptr<ResNet> make_resnet18(const ResNetOptions& o = {});
std::shared_ptr<ResNet> make_resnet34(const ResNetOptions& o = {});
std::shared_ptr<ResNet> make_resnet50(const ResNetOptions& o = {});

// ViT-B/16 (ViTConfig::vit_b16: 86,567,656 parameters) and the small ViT for Fashion-MNIST
// (ViTConfig::fashion_mnist, patch 4 or 7). x: (N, C, H, W) -> (N, num_classes).
std::shared_ptr<VisionTransformer> make_vit_b16(int64_t num_classes = 1000);
std::shared_ptr<VisionTransformer> make_vit_fashion_mnist(int64_t patch_size = 4);

}  // namespace loom::nn
