// The workload models and the ResNet/ViT configurations of nn/models.h.
// Leaves out: the blocks (nn/resnet.cpp, nn/vit.cpp).
#include "nn/models.h"

namespace loom::nn {

std::shared_ptr<Sequential> make_mlp(int64_t hidden, int64_t classes) {
  return make<Sequential>(make<Flatten>(), make<Linear>(784, hidden), make<ReLU>(),
                          make<Linear>(hidden, hidden), make<ReLU>(),
                          make<Linear>(hidden, classes));
}

namespace {
// Conv2d(in, out, 3, padding 1, no bias), BatchNorm2d(out), ReLU
void conv_bn_relu(Sequential& s, int64_t in, int64_t out) {
  Conv2dOptions o;
  o.padding = 1;
  o.bias = false;
  s.push_back(make<Conv2d>(in, out, 3, o));
  s.push_back(make<BatchNorm2d>(out));
  s.push_back(make<ReLU>());
}
}  // namespace

std::shared_ptr<Sequential> make_cnn(int64_t classes) {
  auto s = make<Sequential>();
  conv_bn_relu(*s, 1, 32);
  conv_bn_relu(*s, 32, 64);
  s->push_back(make<MaxPool2d>(2));
  conv_bn_relu(*s, 64, 128);
  s->push_back(make<MaxPool2d>(2));
  s->push_back(make<AdaptiveAvgPool2d>(1));
  s->push_back(make<Flatten>());
  s->push_back(make<Linear>(128, classes));
  return s;
}

std::shared_ptr<Sequential> make_wide(int64_t classes) {
  auto s = make<Sequential>();
  s->push_back(make<Flatten>());
  s->push_back(make<Linear>(784, 4096));
  s->push_back(make<ReLU>());
  for (int i = 0; i < 7; ++i) {
    s->push_back(make<Linear>(4096, 4096));
    s->push_back(make<ReLU>());
  }
  s->push_back(make<Linear>(4096, classes));
  return s;
}

namespace {
std::shared_ptr<ResNet> make_resnet(ResNetBlock block, std::array<int64_t, 4> layers,
                                    const ResNetOptions& o) {
  return make<ResNet>(ResNetConfig{.block = block,
                                   .layers = layers,
                                   .num_classes = o.num_classes,
                                   .in_channels = o.in_channels,
                                   .small_stem = o.small_stem,
                                   .zero_init_residual = o.zero_init_residual});
}
}  // namespace

std::shared_ptr<ResNet> make_resnet18(const ResNetOptions& o) {
  return make_resnet(ResNetBlock::Basic, {2, 2, 2, 2}, o);
}

std::shared_ptr<ResNet> make_resnet34(const ResNetOptions& o) {
  return make_resnet(ResNetBlock::Basic, {3, 4, 6, 3}, o);
}

std::shared_ptr<ResNet> make_resnet50(const ResNetOptions& o) {
  return make_resnet(ResNetBlock::Bottleneck, {3, 4, 6, 3}, o);
}

std::shared_ptr<VisionTransformer> make_vit_b16(int64_t num_classes) {
  ViTConfig c = ViTConfig::vit_b16();
  c.num_classes = num_classes;
  return make<VisionTransformer>(c);
}

std::shared_ptr<VisionTransformer> make_vit_fashion_mnist(int64_t patch_size) {
  return make<VisionTransformer>(ViTConfig::fashion_mnist(patch_size));
}

}  // namespace loom::nn
