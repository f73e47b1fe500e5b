// ResNet's blocks and model (nn/resnet.h). Each BatchNorm followed by a ReLU runs as one op
// (batch_norm with relu, as nn::fuse's BatchNormReLU2d), and a block's last BatchNorm with the
// shortcut's add and the ReLU as another (batch_norm_add_relu); convolutions under autocast on CUDA
// go channels-last by themselves (amp::conv_layout), as in the CNN. Leaves out: the ResNet-18/34/50
// configurations (nn/models.cpp) and training programs.
#include "nn/resnet.h"

#include "autograd/anomaly.h"
#include "autograd/ops/ops.h"
#include "nn/fused.h"
#include "nn/init.h"

namespace loom::nn {

namespace {

// Conv2d(in, out, k, stride, padding (k - 1) / 2, no bias).
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride = 1) {
  return make<Conv2d>(in, out, k,
                      Conv2dOptions{.stride = stride, .padding = (k - 1) / 2, .bias = false});
}

// relu(bn(x)) as one op (loom::batch_norm with relu); in anomaly mode the two layers one by one,
// as BatchNormReLU2d does, so a NaN is reported against the BatchNorm that made it.
Tensor bn_relu(const ModuleHolder<BatchNorm2d>& bn, const Tensor& x) {
  if (autograd::is_anomaly_enabled()) return relu(bn(x));
  return bn->forward(x, /*relu=*/true);
}

// The projection shortcut (1x1 conv with the stride, BatchNorm) when the shape changes, else null.
std::shared_ptr<Sequential> shortcut(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return make<Sequential>(conv(in, out, 1, stride), make<BatchNorm2d>(out));
}

void check_block(const char* name, int64_t in, int64_t planes, int64_t stride) {
  LOOM_CHECK(in > 0 && planes > 0 && stride > 0, name, ": in_channels ", in, ", planes ", planes,
             " and stride ", stride, " must be positive");
}

}  // namespace

// ---------------------------------------------------------------- BasicBlock

BasicBlock::BasicBlock(int64_t in, int64_t p, int64_t s)
    : Module("BasicBlock"), in_channels(in), planes(p), stride(s) {
  check_block("BasicBlock", in, p, s);
  conv1 = register_module("conv1", conv(in, p, 3, s));
  bn1 = register_module("bn1", make<BatchNorm2d>(p));
  conv2 = register_module("conv2", conv(p, p, 3));
  bn2 = register_module("bn2", make<BatchNorm2d>(p));
  if (auto d = shortcut(in, p * kExpansion, s)) downsample = register_module("downsample", d);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = bn_relu(bn1, conv1(x));  // (N, planes, H/s, W/s)
  // relu(bn2(conv2(h)) + shortcut) as one op (Note [Batch norm's fusions]; the ops one by one in
  // anomaly mode); the shortcut: x or its projection. (N, planes, H/s, W/s)
  return bn2->forward_add_relu(conv2(h), downsample ? downsample(x) : x);
}

// ---------------------------------------------------------------- Bottleneck

Bottleneck::Bottleneck(int64_t in, int64_t p, int64_t s)
    : Module("Bottleneck"), in_channels(in), planes(p), stride(s) {
  check_block("Bottleneck", in, p, s);
  conv1 = register_module("conv1", conv(in, p, 1));
  bn1 = register_module("bn1", make<BatchNorm2d>(p));
  conv2 = register_module("conv2", conv(p, p, 3, s));
  bn2 = register_module("bn2", make<BatchNorm2d>(p));
  conv3 = register_module("conv3", conv(p, p * kExpansion, 1));
  bn3 = register_module("bn3", make<BatchNorm2d>(p * kExpansion));
  if (auto d = shortcut(in, p * kExpansion, s)) downsample = register_module("downsample", d);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor h = bn_relu(bn1, conv1(x));  // (N, planes, H, W)
  h = bn_relu(bn2, conv2(h));         // (N, planes, H/s, W/s)
  // relu(bn3(conv3(h)) + shortcut) as one op, as in BasicBlock. (N, 4 planes, H/s, W/s)
  return bn3->forward_add_relu(conv3(h), downsample ? downsample(x) : x);
}

// ---------------------------------------------------------------- ResNet

void ResNetConfig::check() const {
  LOOM_CHECK(num_classes > 0 && in_channels > 0, "ResNetConfig: num_classes ", num_classes,
             " and in_channels ", in_channels, " must be positive");
  for (size_t i = 0; i < layers.size(); ++i)
    LOOM_CHECK(layers[i] > 0, "ResNetConfig: layers[", i, "] is ", layers[i],
               "; every stage needs at least one block");
}

ResNet::ResNet(ResNetConfig cfg) : Module("ResNet"), config(cfg) {
  config.check();
  conv1 = register_module(
      "conv1", cfg.small_stem ? conv(cfg.in_channels, 64, 3) : conv(cfg.in_channels, 64, 7, 2));
  bn1 = register_module("bn1", make<BatchNorm2d>(64));
  if (cfg.small_stem)
    maxpool = register_module("maxpool", make<Identity>("small stem: no max-pool"));
  else
    maxpool =
        register_module("maxpool", make<MaxPool2d>(3, MaxPool2dOptions{.stride = 2, .padding = 1}));
  layer1 = register_module("layer1", make_stage(64, cfg.layers[0], 1));
  layer2 = register_module("layer2", make_stage(128, cfg.layers[1], 2));
  layer3 = register_module("layer3", make_stage(256, cfg.layers[2], 2));
  layer4 = register_module("layer4", make_stage(512, cfg.layers[3], 2));
  avgpool = register_module("avgpool", make<AdaptiveAvgPool2d>(1));
  fc = register_module("fc", make<Linear>(in_planes_, cfg.num_classes));
  init_weights();
}

std::shared_ptr<Sequential> ResNet::make_stage(int64_t planes, int64_t blocks, int64_t stride) {
  auto s = make<Sequential>();
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t st = i == 0 ? stride : 1;
    if (config.block == ResNetBlock::Basic) {
      s->push_back(make<BasicBlock>(in_planes_, planes, st));
      in_planes_ = planes * BasicBlock::kExpansion;
    } else {
      s->push_back(make<Bottleneck>(in_planes_, planes, st));
      in_planes_ = planes * Bottleneck::kExpansion;
    }
  }
  return s;
}

void ResNet::init_weights() {
  for (const auto& [name, m] : named_modules()) {
    if (auto* c = dynamic_cast<const Conv2d*>(m.get())) {
      init::kaiming_normal_(c->weight, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
    } else if (auto* bn = dynamic_cast<const BatchNorm2d*>(m.get())) {
      init::ones_(bn->weight);
      init::zeros_(bn->bias);
    }
  }
  if (!config.zero_init_residual) return;
  for (const auto& stage : {layer1, layer2, layer3, layer4})
    for (const auto& [name, block] : stage->named_children()) {
      if (auto* b = dynamic_cast<BasicBlock*>(block.get())) init::zeros_(b->last_bn().weight);
      if (auto* b = dynamic_cast<Bottleneck*>(block.get())) init::zeros_(b->last_bn().weight);
    }
}

// x: (N, in_channels, H, W) -> (N, num_classes)
Tensor ResNet::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == config.in_channels, "ResNet: input ",
             x.defined() ? describe(x) : std::string("undefined"), " should be (N, ",
             config.in_channels, ", H, W)");
  Tensor h = (*maxpool)(bn_relu(bn1, conv1(x)));  // (N, 64, H/4, W/4); small stem (N, 64, H, W)
  h = layer4(layer3(layer2(layer1(h))));          // (N, 512 e, H/32, W/32); small stem H/8, W/8
  return fc(flatten(avgpool(h), 1));              // (N, 512 e) -> (N, num_classes)
}

int64_t ResNet::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace loom::nn
