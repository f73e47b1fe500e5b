// The Vision Transformer (nn/vit.h, built by nn/models.h): ViT-B/16's published parameter count,
// shapes, the encoder block (nn/transformer.h's TransformerBlock, non-causal, the exact GELU) and
// the whole feature extractor against loom's primitive ops in float64 (matmul, softmax, matmul
// without a mask; output and every gradient), Adam steps that lower the loss, the state_dict names
// and a save/load round trip, and the errors. Leaves out: CUDA and autocast (the ops' tests), the
// GPT itself (tests/nn/test_gpt.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "nn/init.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
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

// 8x8 images of 2 channels in 4x4 patches (4 patches), 2 layers, 16 wide, 2 heads, 3 classes.
ViTConfig tiny() {
  return ViTConfig{.image_size = 8,
                   .patch_size = 4,
                   .in_channels = 2,
                   .num_classes = 3,
                   .n_layer = 2,
                   .n_head = 2,
                   .n_embd = 16};
}

// ---------------------------------------------------------------- the primitive-op reference

using Params = std::map<std::string, Tensor>;  // the parameters, cloned into new leaves

Params clone_params(const Module& m) {
  Params p;
  for (const auto& [name, t] : m.named_parameters())
    p[name] = t.detach().clone().requires_grad_(true);
  return p;
}

Tensor ref_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor mu = mean(x, {-1}, true);
  Tensor var = mean(square(x - mu), {-1}, true);
  return (x - mu) * rsqrt(var + eps) * w + b;
}

Tensor ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return matmul(x, transpose(w, 0, 1)) + b;
}

// One pre-norm encoder block, parameters under `pre` ("" or "blocks.0."): x (B, T, C) -> same.
Tensor ref_block(const Params& p, const std::string& pre, const Tensor& x, int64_t H, double eps) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / H;
  auto P = [&](const std::string& n) { return p.at(pre + n); };
  Tensor a = ref_layer_norm(x, P("ln_1.weight"), P("ln_1.bias"), eps);
  Tensor qkv = ref_linear(a, P("attn.c_attn.weight"), P("attn.c_attn.bias"));  // (B, T, 3C)
  auto head_of = [&](int64_t i) {                                              // (B, H, T, D)
    return permute(view(slice(qkv, 2, i * C, (i + 1) * C), {B, T, H, D}), {0, 2, 1, 3});
  };
  Tensor s = matmul(head_of(0), transpose(head_of(1), 2, 3)) * (1.0 / std::sqrt(double(D)));
  Tensor y = matmul(softmax(s, -1), head_of(2));  // no mask: every token sees every token
  y = reshape(permute(y, {0, 2, 1, 3}), {B, T, C});
  Tensor r = x + ref_linear(y, P("attn.c_proj.weight"), P("attn.c_proj.bias"));
  Tensor m = ref_layer_norm(r, P("ln_2.weight"), P("ln_2.bias"), eps);
  m = gelu(ref_linear(m, P("mlp.c_fc.weight"), P("mlp.c_fc.bias")));  // the exact (erf) GELU
  return r + ref_linear(m, P("mlp.c_proj.weight"), P("mlp.c_proj.bias"));
}

// The model's features(x): (B, in, S, S) -> (B, 1 + N, C).
Tensor ref_features(const Params& p, const Tensor& x, const ViTConfig& c) {
  Conv2dParams cp;
  cp.stride = {c.patch_size, c.patch_size};
  Tensor t = conv2d(x, p.at("patch_embed.proj.weight"), p.at("patch_embed.proj.bias"), cp);
  t = transpose(flatten(t, 2), 1, 2);  // (B, N, C)
  Tensor cls = expand(p.at("cls_token"), {x.size(0), 1, c.n_embd});
  Tensor h = cat({cls, t}, 1) + p.at("pos_embed");
  for (int64_t l = 0; l < c.n_layer; ++l)
    h = ref_block(p, str("blocks.", l, "."), h, c.n_head, c.ln_eps);
  return ref_layer_norm(h, p.at("norm.weight"), p.at("norm.bias"), c.ln_eps);
}

// f(model, x) against f_ref(ref params, x) in float64: the output, and the gradients of x and of
// every parameter for sum(y * g).
template <typename F, typename FRef>
void expect_matches_reference(Module& m, const Shape& x_shape, F f, FRef f_ref) {
  m.to(kF64);
  Params ref = clone_params(m);
  manual_seed(21);
  Tensor x = randn(x_shape, {.dtype = kF64}).requires_grad_(true);
  Tensor xr = x.detach().clone().requires_grad_(true);
  Tensor y = f(x), yr = f_ref(ref, xr);
  EXPECT_LT(max_abs_diff(y, yr), 1e-12);
  Tensor g = randn(y.shape(), {.dtype = kF64});
  sum(y * g).backward();
  sum(yr * g).backward();
  EXPECT_LT(max_abs_diff(x.grad(), xr.grad()), 1e-12) << "input gradient";
  for (const auto& [name, t] : m.named_parameters()) {
    ASSERT_EQ(t.grad().defined(), ref.at(name).grad().defined()) << name;  // head: neither
    if (!t.grad().defined()) continue;
    EXPECT_LT(max_abs_diff(t.grad(), ref.at(name).grad()), 1e-11) << name;
  }
}

}  // namespace

TEST(ViT, ParameterCountOfVitB16IsPublished) {
  auto m = make_vit_b16();
  EXPECT_EQ(m->num_parameters(), 86567656);
  EXPECT_EQ(m->pos_embed.shape(), Shape({1, 197, 768}));
  EXPECT_EQ(m->blocks->size(), 12u);
}

TEST(ViT, ShapesForFashionMnistWithPatch4And7) {
  for (int64_t patch : {4, 7}) {
    manual_seed(1);
    auto m = make_vit_fashion_mnist(patch);
    const int64_t n = (28 / patch) * (28 / patch);
    Tensor x = randn({3, 1, 28, 28});
    EXPECT_EQ(m->patch_embed(x).shape(), Shape({3, n, 128})) << patch;
    EXPECT_EQ(m->features(x).shape(), Shape({3, 1 + n, 128})) << patch;
    EXPECT_EQ(m->forward(x).shape(), Shape({3, 10})) << patch;
  }
}

TEST(ViT, EncoderBlockIsNonCausalWithTheExactGeluAsPrimitiveOps) {
  const ViTConfig c = tiny();
  manual_seed(2);
  TransformerBlock block(c.block_config());
  EXPECT_EQ(block.attn->type_name(), "SelfAttention");
  EXPECT_EQ(std::dynamic_pointer_cast<MLP>(block.mlp)->gelu->approximate, "none");
  auto f = [&](const Tensor& x) { return block(x); };
  auto f_ref = [&](const Params& p, const Tensor& x) {
    return ref_block(p, "", x, c.n_head, c.ln_eps);
  };
  expect_matches_reference(block, {2, 5, 16}, f, f_ref);
}

TEST(ViT, FeaturesEqualPrimitiveOps) {
  const ViTConfig c = tiny();
  manual_seed(3);
  VisionTransformer m(c);
  auto f = [&](const Tensor& x) { return m.features(x); };
  auto f_ref = [&](const Params& p, const Tensor& x) { return ref_features(p, x, c); };
  expect_matches_reference(m, {2, 2, 8, 8}, f, f_ref);
}

TEST(ViT, InitStartsTheHeadAtZeroAndTheClassTokenAtZero) {
  manual_seed(4);
  VisionTransformer m(tiny());
  EXPECT_EQ(m.forward(randn({2, 2, 8, 8})).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(m.cls_token.to_vector<float>(), std::vector<float>(16, 0.0f));
  EXPECT_NE(m.pos_embed.to_vector<float>()[0], 0.0f);
}

TEST(ViT, AdamStepsLowerTheLoss) {
  manual_seed(5);
  VisionTransformer m(tiny());
  Tensor x = randn({16, 2, 8, 8});
  Tensor y = randint(0, 3, {16});
  optim::AdamW opt(m.parameters(), {.lr = 3e-3});
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 25; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m.forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, 0.5f * first) << "first " << first << ", last " << last;
}

TEST(ViT, StateDictNamesAndSaveLoadRoundTrip) {
  manual_seed(6);
  VisionTransformer a(tiny());
  for (const auto& p : a.parameters()) init::normal_(p, 0.0, 0.1);  // a non-zero head too
  StateDict sd = a.state_dict();
  for (const char* key :
       {"patch_embed.proj.weight", "cls_token", "pos_embed", "blocks.1.attn.c_attn.weight",
        "blocks.0.mlp.c_fc.bias", "norm.weight", "head.weight"})
    EXPECT_NE(find(sd, key), nullptr) << key;
  test::TempDir dir;
  TrainingState st;
  st.model = sd;
  const std::string path = save_checkpoint(dir.path, 1, st);
  manual_seed(7);
  VisionTransformer b(tiny());
  b.load_state_dict(load_checkpoint(path).model);
  Tensor x = randn({2, 2, 8, 8});
  EXPECT_EQ(a.forward(x).to_vector<float>(), b.forward(x).to_vector<float>());
}

TEST(ViT, BadConfigsAndInputsAreErrorsNamingTheValues) {
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  ViTConfig c = tiny();
  c.patch_size = 3;
  EXPECT_NE(message([&] { VisionTransformer m(c); })
                .find("image_size 8 is not a multiple of "
                      "patch_size 3"),
            std::string::npos);
  VisionTransformer m(tiny());
  EXPECT_NE(message([&] {
              m.forward(randn({2, 2, 12, 12}));
            }).find("should be (B, 2, 8, 8)"),
            std::string::npos);
  TransformerBlock block(tiny().block_config());
  KVCache cache;
  EXPECT_NE(message([&] {
              block.forward(randn({1, 3, 16}), cache, 0);
            }).find("causal"),
            std::string::npos);
}
