// The worked example of docs/adding-a-model.md, compiled so that the page cannot rot: TinyLM, a
// character-level language model made of the plain modules of nn/transformer.h. Its state dict
// has the names the page promises, it learns a repeating text, and its trunk fused by
// nn::fuse_transformer (nn/fuse_transformer.h) gives the plain model's loss and gradients.
// Leaves out: GPT and ViT themselves (tests/nn/test_gpt.cpp, test_vit.cpp,
// test_fused_transformer.cpp).
#include <gtest/gtest.h>

#include <algorithm>

#include "autograd/ops/ops.h"
#include "nn/fuse_transformer.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/transformer.h"

namespace app {
using namespace loom;

// ---- as in docs/adding-a-model.md, section 1 ----
struct TinyLMConfig {
  int64_t vocab = 256, context = 128, width = 128, heads = 4, layers = 4;
};

class TinyLM : public nn::Module {
 public:
  explicit TinyLM(const TinyLMConfig& c) : nn::Module("TinyLM"), config(c) {
    nn::TransformerConfig block{.n_embd = c.width, .n_head = c.heads, .causal = true};
    tok = register_module("tok", nn::make<nn::Embedding>(c.vocab, c.width));
    pos = register_module("pos", nn::make<nn::Embedding>(c.context, c.width));
    blocks = register_module("blocks", nn::make<nn::TransformerStack>(block, c.layers));
    norm = register_module("norm", nn::make_norm(block));
    head = register_module("head", nn::make<nn::Linear>(c.width, c.vocab));
  }

  Tensor forward(const Tensor& idx) override {  // idx: (B, T) int64
    Tensor positions =
        arange(0.0, double(idx.size(1)), 1.0, {.dtype = kI64, .device = idx.device()});
    Tensor x = tok(idx) + pos(positions);    // (B, T, C)
    return head(blocks->forward(x, *norm));  // (B, T, V)
  }

  TinyLMConfig config;
  nn::ModuleHolder<nn::Embedding> tok, pos;
  nn::ModuleHolder<nn::TransformerStack> blocks;
  nn::ModuleHolder<nn::Module> norm;
  nn::ModuleHolder<nn::Linear> head;
};
// ---- end of the page's code ----
}  // namespace app

using namespace loom;

namespace {

app::TinyLMConfig small() {
  return {.vocab = 16, .context = 12, .width = 16, .heads = 2, .layers = 2};
}

// (B, T) windows of a repeating 0..5 sequence and their next tokens.
std::pair<Tensor, Tensor> batch() {
  std::vector<int64_t> x, y;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 12; ++t) x.push_back((b + t) % 6), y.push_back((b + t + 1) % 6);
  return {from_vector(x, {4, 12}), from_vector(y, {4, 12})};
}

Tensor lm_loss(nn::Module& m, const Tensor& x, const Tensor& y) {
  return cross_entropy(flatten(m(x), 0, 1), flatten(y));
}

}  // namespace

TEST(TinyLM, TheStateDictHasThePagesNames) {
  app::TinyLM m(small());
  auto sd = m.state_dict();
  std::vector<std::string> keys;
  for (auto& [k, t] : sd) keys.push_back(k);
  for (const char* k : {"tok.weight", "pos.weight", "blocks.0.attn.c_attn.weight",
                        "blocks.1.mlp.c_fc.weight", "norm.weight", "head.weight"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  EXPECT_EQ(m(batch().first).shape(), (Shape{4, 12, 16}));
}

TEST(TinyLM, LearnsARepeatingText) {
  manual_seed(1);
  app::TinyLM m(small());
  optim::AdamW opt(m.parameters(), {.lr = 1e-2});
  auto [x, y] = batch();
  const double first = lm_loss(m, x, y).item();
  for (int s = 0; s < 60; ++s) {
    opt.zero_grad();
    lm_loss(m, x, y).backward();
    opt.step();
  }
  const double last = lm_loss(m, x, y).item();
  EXPECT_GT(first, 2.0);  // about ln 16 at the start
  EXPECT_LT(last, 0.1);   // the sequence is fully predictable from one token
}

// Section 3 of the page: the trunk fused beside the model; the same loss and gradients in float64.
TEST(TinyLM, ItsFusedTrunkGivesThePlainModelsLossAndGradients) {
  manual_seed(2);
  app::TinyLM plain(small()), fused(small());
  plain.to(kF64), fused.to(kF64);
  fused.load_state_dict(plain.state_dict());  // strict: an error on any mismatch
  auto fusions = nn::fuse_transformer(fused, fused.blocks, fused.norm);
  EXPECT_FALSE(fusions.empty());
  EXPECT_EQ(fused.blocks->type_name(), "FusedTransformerStack");
  auto [x, y] = batch();
  Tensor a = lm_loss(plain, x, y), b = lm_loss(fused, x, y);
  EXPECT_NEAR(a.item(), b.item(), 1e-12);
  a.backward(), b.backward();
  auto pa = plain.named_parameters(), pb = fused.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_LE(max(abs(pa[i].second.grad() - pb[i].second.grad())).item(), 1e-10) << pa[i].first;
  }
}
