// vision_torch: the libtorch twins of loom's ImageNet classifiers for bench_train_torch's resnet50
// and vit-b16 workloads, on (B, 3, 224, 224) images with 1000 classes.
// ResNet50: torchvision's resnet50 (v1.5, as nn/resnet.h): the stem (7x7 stride-2 conv, BN, ReLU,
// 3x3 stride-2 max-pool), Bottleneck stages of 3, 4, 6, 3 blocks (the stride on the 3x3 conv, a
// 1x1 conv + BN projection shortcut where the shape changes), global average pooling, fc 2048 ->
// 1000; torchvision's init and its in-place ReLUs; 25,557,032 parameters.
// ViT: ViT-B/16 as nn/vit.h and nn/vit.cpp build it: a 16x16 stride-16 patch convolution, a class
// token and learned position embeddings, 12 pre-norm blocks (gpt_torch::Block, non-causal, exact
// GELU, LayerNorm eps 1e-6; benchmarks/libtorch/gpt_torch.h) over 12 heads, a final LayerNorm, a
// head on the class token; loom's init (VisionTransformer::init_weights); 86,567,656 parameters.
// Leaves out: dropout and stochastic depth (the benchmark trains without them), zero_init_residual,
// other depths and sizes, pretrained weights (the ViT's parameter names are loom's, not
// torchvision's; its patch embedding is patch_embed, not patch_embed.proj).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "benchmarks/libtorch/gpt_torch.h"

namespace vision_torch {

inline torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

// x: (N, in, H, W) -> (N, 4 planes, H/stride, W/stride): conv1 1x1 (in -> planes), conv2 3x3 with
// the stride, conv3 1x1 (planes -> 4 planes), each followed by its BatchNorm; ReLU after bn1, bn2
// and the shortcut's add. The shortcut: downsample (1x1 conv with the stride, BN) or x itself.
struct BottleneckImpl : torch::nn::Module {
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1 = register_module("conv1", conv(in, planes, 1, 1, 0));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", conv(planes, planes, 3, stride, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
    conv3 = register_module("conv3", conv(planes, 4 * planes, 1, 1, 0));
    bn3 = register_module("bn3", torch::nn::BatchNorm2d(4 * planes));
    if (stride != 1 || in != 4 * planes)
      downsample =
          register_module("downsample", torch::nn::Sequential(conv(in, 4 * planes, 1, stride, 0),
                                                              torch::nn::BatchNorm2d(4 * planes)));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn1(conv1(x)).relu_();
    y = bn2(conv2(y)).relu_();
    y = bn3(conv3(y));
    y += downsample.is_empty() ? x : downsample->forward(x);
    return y.relu_();
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};  // empty for the identity shortcut
};
TORCH_MODULE(Bottleneck);

// x: (N, 3, 224, 224) -> logits (N, classes). Stages layer1..layer4 of 3, 4, 6, 3 Bottlenecks,
// widths 256, 512, 1024, 2048 at 56, 28, 14, 7 pixels; the first block of stages 2-4 strides 2.
struct ResNet50Impl : torch::nn::Module {
  explicit ResNet50Impl(int64_t classes = 1000) {
    conv1 = register_module("conv1", conv(3, 64, 7, 2, 3));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
    maxpool = register_module(
        "maxpool", torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));
    layer1 = register_module("layer1", stage(64, 3, 1));
    layer2 = register_module("layer2", stage(128, 4, 2));
    layer3 = register_module("layer3", stage(256, 6, 2));
    layer4 = register_module("layer4", stage(512, 3, 2));
    fc = register_module("fc", torch::nn::Linear(2048, classes));
    // torchvision's init: conv weights kaiming_normal_ (fan_out, ReLU), BatchNorm 1 and 0; fc keeps
    // Linear's default.
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<torch::nn::Conv2dImpl>()) {
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* b = m->as<torch::nn::BatchNorm2dImpl>()) {
        torch::nn::init::ones_(b->weight);
        torch::nn::init::zeros_(b->bias);
      }
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = maxpool(bn1(conv1(x)).relu_());                                    // (N, 64, 56, 56)
    y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));  // (N, 2048, 7, 7)
    y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);                       // (N, 2048)
    return fc(y);
  }

  // `blocks` Bottlenecks of `planes` (4 planes out), the first with `stride`; in_planes follows.
  torch::nn::Sequential stage(int64_t planes, int64_t blocks, int64_t stride) {
    torch::nn::Sequential s;
    for (int64_t i = 0; i < blocks; ++i) {
      s->push_back(Bottleneck(in_planes, planes, i == 0 ? stride : 1));
      in_planes = 4 * planes;
    }
    return s;
  }

  int64_t in_planes = 64;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::MaxPool2d maxpool{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet50);

struct ViTConfig {
  int64_t image = 224, patch = 16, channels = 3, classes = 1000;
  int64_t layers = 12, heads = 12, width = 768;  // C; the MLP is 4C wide (3072)
  int64_t patches() const { return (image / patch) * (image / patch); }  // N: 196
};

// x: (B, channels, image, image) -> logits (B, classes).
struct ViTImpl : torch::nn::Module {
  explicit ViTImpl(const ViTConfig& c = {}) : width(c.width) {
    patch_embed = register_module(
        "patch_embed",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(c.channels, c.width, c.patch).stride(c.patch)));
    cls_token = register_parameter("cls_token", torch::zeros({1, 1, c.width}));
    pos_embed = register_parameter("pos_embed", torch::zeros({1, 1 + c.patches(), c.width}));
    gpt_torch::Config bc;  // the blocks: non-causal, exact GELU, eps 1e-6 (ViTConfig::block_config)
    bc.layers = c.layers, bc.heads = c.heads, bc.width = c.width;
    bc.causal = false, bc.gelu = "none", bc.ln_eps = 1e-6;
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(gpt_torch::Block(bc));
    register_module("blocks", blocks);
    norm = register_module("norm",
                           torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width}).eps(1e-6)));
    head = register_module("head", torch::nn::Linear(c.width, c.classes));
    init_weights();
  }

  // loom's VisionTransformer::init_weights (torchvision's, with normal for its truncated normal):
  // the patch convolution's weight ~ N(0, 1 / fan_in) and bias 0, pos_embed ~ N(0, 0.02),
  // cls_token 0, the blocks' Linear weights xavier_uniform_, every bias 0, LayerNorms 1 and 0,
  // head 0.
  void init_weights() {
    torch::NoGradGuard g;
    auto& w = patch_embed->weight;  // (C, channels, patch, patch): fan_in = channels patch^2
    w.normal_(0.0, std::sqrt(1.0 / double(w[0].numel())));
    patch_embed->bias.zero_();
    pos_embed.normal_(0.0, 0.02);
    cls_token.zero_();
    for (auto& p : blocks->named_parameters()) {
      const std::string& n = p.key();  // "0.ln_1.weight", "0.c_attn.bias", ...
      if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0)
        p.value().zero_();
      else if (n.find(".ln_") != std::string::npos)
        p.value().fill_(1.0);
      else
        torch::nn::init::xavier_uniform_(p.value());  // c_attn, attn_proj, c_fc, mlp_proj
    }
    norm->weight.fill_(1.0);
    norm->bias.zero_();
    head->weight.zero_();
    head->bias.zero_();
  }

  torch::Tensor forward(const torch::Tensor& x) {
    int64_t B = x.size(0);
    auto t = patch_embed(x).flatten(2).transpose(1, 2);  // (B, C, H/p, W/p) -> (B, N, C)
    t = t.to(cls_token.scalar_type());  // autocast's bf16 -> the residual stream's float32, as loom
    auto h = torch::cat({cls_token.expand({B, 1, width}), t}, 1) + pos_embed;  // (B, 1 + N, C)
    for (const auto& b : *blocks) h = b->as<gpt_torch::BlockImpl>()->forward(h);
    return head(norm(h).select(1, 0));  // the class token (B, C) -> (B, classes)
  }

  int64_t width;
  torch::nn::Conv2d patch_embed{nullptr};
  torch::Tensor cls_token, pos_embed;  // (1, 1, C); (1, 1 + N, C), the class token's first
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ViT);

}  // namespace vision_torch
