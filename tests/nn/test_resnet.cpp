// ResNet (nn/resnet.h, built by nn/models.h): shapes with both stems, torchvision's parameter
// counts, BasicBlock and Bottleneck (identity and projection shortcuts) against the same block
// written with conv2d, batch_norm, relu and + in float64 (output and every gradient),
// zero_init_residual starting each block as its shortcut, training steps that lower the loss,
// torchvision's state_dict names and a save/load round trip, and the errors.
// Leaves out: CUDA, autocast and channels-last (the conv op's tests), train_cnn.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "nn/optim/sgd.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0.0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// ---------------------------------------------------------------- the primitive-op reference

using Params = std::map<std::string, Tensor>;  // the block's parameters, cloned into new leaves

Params clone_params(const Module& m) {
  Params p;
  for (const auto& [name, t] : m.named_parameters())
    p[name] = t.detach().clone().requires_grad_(true);
  return p;
}

// conv (no bias) then batch norm with batch statistics: prefix "conv1"/"bn1" or "downsample.0"/.1
Tensor ref_conv_bn(const Params& p, const Tensor& x, const std::string& conv, const std::string& bn,
                   int64_t stride, int64_t padding) {
  Conv2dParams cp;
  cp.stride = {stride, stride};
  cp.padding = {padding, padding};
  Tensor y = conv2d(x, p.at(conv + ".weight"), Tensor(), cp);
  return batch_norm(y, p.at(bn + ".weight"), p.at(bn + ".bias"), Tensor(), Tensor(),
                    /*training=*/true);
}

Tensor ref_shortcut(const Params& p, const Tensor& x, int64_t stride) {
  if (!p.count("downsample.0.weight")) return x;
  return ref_conv_bn(p, x, "downsample.0", "downsample.1", stride, 0);
}

Tensor ref_basic(const Params& p, const Tensor& x, int64_t stride) {
  Tensor h = relu(ref_conv_bn(p, x, "conv1", "bn1", stride, 1));
  Tensor y = ref_conv_bn(p, h, "conv2", "bn2", 1, 1);
  return relu(y + ref_shortcut(p, x, stride));
}

Tensor ref_bottleneck(const Params& p, const Tensor& x, int64_t stride) {
  Tensor h = relu(ref_conv_bn(p, x, "conv1", "bn1", 1, 0));
  h = relu(ref_conv_bn(p, h, "conv2", "bn2", stride, 1));
  Tensor y = ref_conv_bn(p, h, "conv3", "bn3", 1, 0);
  return relu(y + ref_shortcut(p, x, stride));
}

// The block (float64, training) and its reference: the same output, and the same gradients of
// the input and of every parameter for the loss sum(y * g).
void expect_block_matches_reference(Module& block, const Shape& x_shape, int64_t stride,
                                    bool bottleneck) {
  block.to(kF64);
  block.train();
  Params ref = clone_params(block);
  manual_seed(11);
  Tensor x = randn(x_shape, {.dtype = kF64}).requires_grad_(true);
  Tensor xr = x.detach().clone().requires_grad_(true);
  Tensor y = block(x);
  Tensor yr = bottleneck ? ref_bottleneck(ref, xr, stride) : ref_basic(ref, xr, stride);
  EXPECT_LT(max_abs_diff(y, yr), 1e-12);
  Tensor g = randn(y.shape(), {.dtype = kF64});
  sum(y * g).backward();
  sum(yr * g).backward();
  EXPECT_LT(max_abs_diff(x.grad(), xr.grad()), 1e-12) << "input gradient";
  for (const auto& [name, t] : block.named_parameters())
    EXPECT_LT(max_abs_diff(t.grad(), ref.at(name).grad()), 1e-11) << name;
}

int64_t count(const Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// A small ResNet for 1x16x16 images: one BasicBlock per stage.
std::shared_ptr<ResNet> tiny_resnet(ResNetBlock block = ResNetBlock::Basic) {
  return make<ResNet>(ResNetConfig{.block = block,
                                   .layers = {1, 1, 1, 1},
                                   .num_classes = 5,
                                   .in_channels = 1,
                                   .small_stem = true});
}

}  // namespace

TEST(ResNet, ParameterCountsAreTorchvisions) {
  EXPECT_EQ(count(*make_resnet18()), 11689512);
  EXPECT_EQ(count(*make_resnet34()), 21797672);
  auto r50 = make_resnet50();
  EXPECT_EQ(count(*r50), 25557032);
  EXPECT_EQ(r50->num_parameters(), 25557032);
}

TEST(ResNet, ShapesWithTheImageNetAndTheSmallStem) {
  manual_seed(1);
  auto imagenet = make_resnet18({.num_classes = 7});
  imagenet->eval();
  EXPECT_EQ(imagenet->forward(randn({2, 3, 64, 64})).shape(), Shape({2, 7}));
  auto small = make_resnet18({.num_classes = 10, .in_channels = 1, .small_stem = true});
  EXPECT_EQ(small->conv1->kernel_size, IntPair(3));
  EXPECT_EQ(small->maxpool->type_name(), "Identity");
  Tensor x = randn({2, 1, 28, 28});
  Tensor h = (*small->maxpool)(small->bn1(small->conv1(x)));
  EXPECT_EQ(h.shape(), Shape({2, 64, 28, 28}));  // the small stem keeps the full image
  h = small->layer1(h);
  EXPECT_EQ(h.shape(), Shape({2, 64, 28, 28}));
  h = small->layer2(h);
  EXPECT_EQ(h.shape(), Shape({2, 128, 14, 14}));
  h = small->layer4(small->layer3(h));
  EXPECT_EQ(h.shape(), Shape({2, 512, 4, 4}));
  EXPECT_EQ(small->forward(x).shape(), Shape({2, 10}));
  auto bottleneck = tiny_resnet(ResNetBlock::Bottleneck);
  EXPECT_EQ(bottleneck->fc->in_features, 2048);
  EXPECT_EQ(bottleneck->forward(randn({3, 1, 16, 16})).shape(), Shape({3, 5}));
}

TEST(ResNet, BasicBlockEqualsPrimitiveOps) {
  BasicBlock identity(8, 8, 1);
  EXPECT_FALSE(identity.downsample);
  expect_block_matches_reference(identity, {3, 8, 6, 6}, 1, false);
  BasicBlock projection(4, 8, 2);
  ASSERT_TRUE(projection.downsample);
  expect_block_matches_reference(projection, {3, 4, 7, 7}, 2, false);
}

TEST(ResNet, BottleneckEqualsPrimitiveOps) {
  Bottleneck projection(6, 4, 2);  // 6 -> 16 channels, stride 2: a projection shortcut
  ASSERT_TRUE(projection.downsample);
  expect_block_matches_reference(projection, {2, 6, 8, 8}, 2, true);
  Bottleneck channels(8, 4, 1);  // stride 1, 8 -> 16 channels: still a projection
  ASSERT_TRUE(channels.downsample);
  expect_block_matches_reference(channels, {2, 8, 5, 5}, 1, true);
  Bottleneck identity(16, 4, 1);
  EXPECT_FALSE(identity.downsample);
  expect_block_matches_reference(identity, {2, 16, 5, 5}, 1, true);
}

TEST(ResNet, InitIsKaimingFanOutAndBatchNormOnesZeros) {
  manual_seed(2);
  auto m = make_resnet18();
  // conv1 (64, 3, 7, 7): std = sqrt(2 / fan_out) = sqrt(2 / (64 * 49))
  auto w = m->conv1->weight.to_vector<float>();
  double ss = 0.0;
  for (float v : w) ss += double(v) * v;
  EXPECT_NEAR(std::sqrt(ss / double(w.size())), std::sqrt(2.0 / (64 * 49)), 0.003);
  auto b = m->layer1->at<BasicBlock>(0);
  EXPECT_EQ(b->bn2->weight.to_vector<float>(), std::vector<float>(64, 1.0f));
  EXPECT_EQ(b->bn2->bias.to_vector<float>(), std::vector<float>(64, 0.0f));
}

TEST(ResNet, ZeroInitResidualStartsEachBlockAsItsShortcut) {
  for (auto kind : {ResNetBlock::Basic, ResNetBlock::Bottleneck}) {
    manual_seed(3);
    ResNetConfig c{.block = kind,
                   .layers = {2, 1, 1, 1},
                   .num_classes = 5,
                   .in_channels = 1,
                   .small_stem = true,
                   .zero_init_residual = true};
    ResNet m(c);
    Tensor h = randn({2, 64, 8, 8});
    for (const auto& stage : {m.layer1, m.layer2, m.layer3, m.layer4}) {
      for (size_t i = 0; i < stage->size(); ++i) {
        auto& block = *(*stage)[i];
        ModuleHolder<Sequential> down = kind == ResNetBlock::Basic
                                            ? stage->at<BasicBlock>(i)->downsample
                                            : stage->at<Bottleneck>(i)->downsample;
        Tensor expected = relu(down ? down(h) : h);
        Tensor y = block(h);
        EXPECT_EQ(y.to_vector<float>(), expected.to_vector<float>())
            << block.type_name() << " " << i;
        h = y;
      }
    }
  }
  // Off by default: the last BatchNorm starts at 1 and the block is not its shortcut.
  auto m = tiny_resnet();
  EXPECT_EQ(m->layer1->at<BasicBlock>(0)->bn2->weight.to_vector<float>()[0], 1.0f);
}

TEST(ResNet, SgdStepsLowerTheLoss) {
  manual_seed(4);
  auto m = tiny_resnet();
  Tensor x = randn({16, 1, 8, 8});  // layer4 sees 1x1 images
  Tensor y = randint(0, 5, {16});
  optim::SGD opt(m->parameters(), {.lr = 0.05, .momentum = 0.9});
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 8; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, 0.5f * first) << "first " << first << ", last " << last;
}

TEST(ResNet, StateDictHasTorchvisionsNamesAndRoundTrips) {
  manual_seed(5);
  auto a = tiny_resnet(ResNetBlock::Bottleneck);
  a->forward(randn({4, 1, 16, 16}));  // running stats move off their initial values
  StateDict sd = a->state_dict();
  for (const char* key : {"conv1.weight", "bn1.running_mean", "layer1.0.conv3.weight",
                          "layer1.0.downsample.0.weight", "layer2.0.downsample.1.running_var",
                          "layer4.0.bn3.num_batches_tracked", "fc.weight", "fc.bias"})
    EXPECT_NE(find(sd, key), nullptr) << key;
  test::TempDir dir;
  TrainingState st;
  st.model = sd;
  const std::string path = save_checkpoint(dir.path, 1, st);
  manual_seed(6);
  auto b = tiny_resnet(ResNetBlock::Bottleneck);
  b->load_state_dict(load_checkpoint(path).model);
  a->eval();
  b->eval();
  Tensor x = randn({2, 1, 16, 16});
  EXPECT_EQ(a->forward(x).to_vector<float>(), b->forward(x).to_vector<float>());
}

TEST(ResNet, BadConfigsAndInputsAreErrorsNamingTheValues) {
  ResNetConfig c;
  c.layers = {2, 0, 2, 2};
  EXPECT_THROW(
      {
        try {
          ResNet m(c);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("layers[1] is 0"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(BasicBlock(4, 8, 0), Error);
  auto m = tiny_resnet();
  try {
    m->forward(randn({2, 3, 16, 16}));
    FAIL() << "a 3-channel input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("should be (N, 1, H, W)"), std::string::npos) << e.what();
  }
}
