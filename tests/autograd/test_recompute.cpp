// Recomputed activations (autograd/recompute.h): a saved output is kept as its recipe, its storage
// freed with the forward's last reference, rebuilt once for all its Saved and freed after the
// last; an output written in place before it is saved (directly, or through a view after another
// op saved it) is saved as it is; batch_norm_apply makes batch_norm's output again bit for bit;
// ResNet, ViT and GPT train bit for bit the same with the switch on, and their forward + backward
// peaks lower (the CPU allocator's live bytes).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/ops/ops.h"
#include "autograd/recompute.h"
#include "core/allocator.h"
#include "kernels/backend.h"
#include "nn/fuse.h"
#include "nn/gpt.h"
#include "nn/resnet.h"
#include "nn/vit.h"

using namespace loom;
using autograd::RecomputeActivationsGuard;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         max(abs(a.to(kF64) - b.to(kF64))).item() == 0.0;
}

}  // namespace

TEST(Recompute, ASavedOutputIsKeptAsItsRecipeAndRebuiltOnceForAllItsUsers) {
  RecomputeActivationsGuard on(true);
  Tensor x = randn({64, 32}).requires_grad_(true);
  int made = 0;
  std::weak_ptr<Storage> first;
  std::vector<float> want;
  std::unique_ptr<autograd::Saved> a, b;
  {
    Tensor y = exp(x.detach());  // an "output" whose recipe is exp of x
    want = y.to_vector<float>();
    first = y.storage();
    autograd::Saved sx = save(x, "test");
    autograd::offer_recompute("test_exp", y, {x}, [sx, &made] {
      ++made;
      return exp(sx.get());
    });
    a = std::make_unique<autograd::Saved>(y, "test");
    b = std::make_unique<autograd::Saved>(y.view({32, 64}), "test");  // a view of it too
    EXPECT_TRUE(a->recomputed() && b->recomputed());
  }
  EXPECT_TRUE(first.expired()) << "the output's storage outlived the forward";
  EXPECT_EQ(a->get().to_vector<float>(), want);
  EXPECT_EQ(b->get().shape(), (Shape{32, 64}));
  EXPECT_EQ(b->get().to_vector<float>(), want);
  EXPECT_EQ(made, 1) << "rebuilt once, shared by both Saved";
  std::weak_ptr<Storage> rebuilt = a->get().storage();
  a.reset();
  EXPECT_FALSE(rebuilt.expired()) << "freed while a Saved still uses it";
  b.reset();
  EXPECT_TRUE(rebuilt.expired()) << "the rebuilt output outlived its last Saved";
}

TEST(Recompute, OffOrOutsideTheGraphNothingIsKeptAsARecipe) {
  Tensor x = randn({8}).requires_grad_(true);
  Tensor y = gelu(x);
  EXPECT_FALSE(y.storage()->recompute) << "the switch is off by default";
  RecomputeActivationsGuard on(true);
  EXPECT_TRUE(gelu(x).storage()->recompute);
  EXPECT_FALSE(gelu(x.detach()).storage()->recompute) << "no input needs a gradient";
  NoGradGuard no_grad;
  EXPECT_FALSE(gelu(x).storage()->recompute);
}

// y = gelu(x) doubled in place before z = y w saves it: the recipe would give gelu(x), so y is
// saved as it is, and w's gradient is the one of the doubled y.
TEST(Recompute, AnOutputWrittenInPlaceBeforeItIsSavedIsSavedAsItIs) {
  Tensor x0 = randn({16, 8}), w0 = randn({8, 4});
  auto grads = [&](bool recompute) {
    RecomputeActivationsGuard guard(recompute);
    Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    Tensor y = gelu(x);
    {
      NoGradGuard no_grad;
      y.mul_(2.0);
    }
    matmul(y, w).sum().backward();
    return w.grad();
  };
  Tensor plain = grads(false), recomputed = grads(true);
  EXPECT_TRUE(bit_equal(plain, recomputed)) << max(abs(plain - recomputed)).item();
}

// The recipe stands for its output only while the storage keeps the version the op left. Here
// relu(batch_norm(x)) has one channel overwritten through a view (as a hook or a mask might) after
// batch norm saved it and before a matmul does: recipe_of gives nothing, and w's gradient is that
// of the written values, y^T 1 (column sums of y, summed here by hand), not of the recipe's.
TEST(Recompute, AnOutputWrittenThroughAViewVoidsItsRecipe) {
  RecomputeActivationsGuard on(true);
  manual_seed(12);
  Tensor x = randn({6, 4}).requires_grad_(true);
  Tensor gamma = ones({4}).requires_grad_(true), beta = zeros({4}).requires_grad_(true);
  Tensor y = batch_norm(x, gamma, beta, Tensor(), Tensor(), true, 0.1, 1e-5, /*relu=*/true);
  ASSERT_TRUE(autograd::recipe_of(y)) << "batch_norm with its ReLU offers a recipe";
  {
    NoGradGuard no_grad;
    select(y, 1, 2).fill_(5.0);
  }
  EXPECT_FALSE(autograd::recipe_of(y)) << "the write left the recipe in place";
  EXPECT_FALSE(autograd::recipe_of(y.view({24}))) << "a view of the written storage";
  Tensor w = randn({4, 3}).requires_grad_(true);
  matmul(y, w).sum().backward();
  const std::vector<float> yv = y.detach().to_vector<float>(), dw = w.grad().to_vector<float>();
  for (int64_t j = 0; j < 4; ++j) {
    double col = 0;
    for (int64_t i = 0; i < 6; ++i) col += yv[size_t(i * 4 + j)];
    // The kernel's float32 sum of 6 terms below 5: five roundings of at most 2^-24 * 30 = 1.8e-6.
    for (int64_t k = 0; k < 3; ++k)
      EXPECT_NEAR(dw[size_t(j * 3 + k)], col, 1e-5) << "w.grad[" << j << "][" << k << "]";
  }
  EXPECT_EQ(yv[2], 5.0f) << "the written channel";
}

TEST(BatchNormApply, RebuildsTheForwardsOutputBitForBit) {
  Backend& be = backend_for(kCPU);
  for (DType dt : {kF32, kF64, kBF16})
    for (bool relu : {false, true}) {
      Tensor x = (randn({4, 6, 5, 3}) * 3.0 + 1.0).to(dt);
      const DType pd = dt == kBF16 ? kF32 : dt;  // the parameters' dtype under autocast
      Tensor w = randn({6}).to(pd), b = randn({6}).to(pd);
      Tensor rm = zeros({6}), rv = ones({6});
      BatchNormOut o = be.batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, relu);
      Tensor again = be.batch_norm_apply(x, w, b, o.save_mean, o.save_invstd, relu);
      EXPECT_TRUE(bit_equal(o.y, again)) << dtype_name(dt) << " relu " << relu;
    }
}

namespace {

// The parameters' gradients and the peak live bytes of one forward + backward of `m` on `x`
// (targets `t`), with the switch as given.
struct Outcome {
  std::vector<Tensor> grads;
  uint64_t peak = 0;
};

template <typename Model, typename Loss>
Outcome run_model(Model& m, bool recompute, Loss loss) {
  RecomputeActivationsGuard guard(recompute);
  m.zero_grad();
  reset_cpu_peak();
  const uint64_t base = cpu_alloc_stats().live_bytes;
  loss().backward();
  Outcome r;
  r.peak = cpu_alloc_stats().peak_live_bytes - base;
  for (const Tensor& p : m.parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

template <typename Model, typename Loss>
void expect_same_gradients_lower_peak(Model& m, Loss loss, double max_ratio) {
  Outcome plain = run_model(m, false, loss), re = run_model(m, true, loss);
  ASSERT_EQ(plain.grads.size(), re.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(bit_equal(plain.grads[i], re.grads[i])) << "parameter " << i;
  if (cpu_alloc_stats().peak_live_bytes == 0) GTEST_SKIP() << "no malloc_usable_size here";
  EXPECT_LT(double(re.peak), max_ratio * double(plain.peak))
      << "plain " << plain.peak << " B, recomputed " << re.peak << " B";
  std::cout << "peak: plain " << plain.peak << " B, recomputed " << re.peak << " B ("
            << double(re.peak) / double(plain.peak) << ")\n";
}

}  // namespace

// A Bottleneck ResNet: batch norm + ReLU outputs rebuilt for the convolutions that follow.
TEST(Recompute, ResNetTrainsBitForBitTheSameAndPeaksLower) {
  manual_seed(3);
  nn::ResNet m(nn::ResNetConfig{.block = nn::ResNetBlock::Bottleneck,
                                .layers = {1, 1, 1, 1},
                                .num_classes = 10,
                                .small_stem = true});
  m.train();
  Tensor x = randn({16, 3, 32, 32}), t = randint(0, 10, {16});
  expect_same_gradients_lower_peak(
      m, [&] { return cross_entropy(m.forward(x), t); }, 0.9);
}

// A ViT (exact GELU between two Linears) and a GPT, plain (the GELU its own op) and fused by
// nn::fuse (the GELU in gelu_mlp's first Linear's epilogue): the GELU's output rebuilt for the
// second Linear.
TEST(Recompute, VitAndGptTrainBitForBitTheSameAndPeakLower) {
  for (bool fused : {false, true}) {
    manual_seed(4);
    nn::ViTConfig vc = nn::ViTConfig::fashion_mnist(7);
    vc.n_layer = 2;
    nn::VisionTransformer vit(vc);
    if (fused) nn::fuse(vit);
    Tensor img = randn({8, 1, 28, 28}), label = randint(0, 10, {8});
    expect_same_gradients_lower_peak(
        vit, [&] { return cross_entropy(vit.forward(img), label); }, 0.95);
    nn::GPT gpt(
        nn::GPTConfig{.vocab_size = 64, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 64});
    if (fused) nn::fuse(gpt);
    Tensor idx = randint(0, 64, {4, 32}), tgt = randint(0, 64, {4, 32});
    expect_same_gradients_lower_peak(
        gpt, [&] { return gpt.loss(idx, tgt); }, 0.95);
  }
}
