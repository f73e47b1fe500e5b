// The plain transformer modules (nn/transformer.h): the config's checks, what the factories
// build, the block's forward as the composition of its children, the stack's checkpointing (the
// same loss and gradients bit for bit) and its final norm, the KV cache's refusals.
// Leaves out: whole models against primitive ops (tests/nn/test_gpt.cpp, tests/nn/test_vit.cpp)
// and the fused modules (tests/nn/test_fused_transformer.cpp).
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "nn/transformer.h"
#include "support/errors.h"

using namespace loom;
using namespace loom::nn;

using loom::test::error_of;

namespace {

TransformerConfig tiny(double dropout = 0.0) {
  return TransformerConfig{.n_embd = 16, .n_head = 4, .dropout = dropout};
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

TEST(TransformerConfig, ChecksNameTheFieldAndValue) {
  TransformerConfig c = tiny();
  c.n_kv_head = 3;
  EXPECT_NE(error_of([&] { c.check(); }).find("n_kv_head 3 does not divide n_head 4"),
            std::string::npos);
  c.n_kv_head = 2;  // grouped-query attention: two query heads per key/value head
  EXPECT_NO_THROW(c.check());
  c = tiny();
  c.positions = Positions::Rotary, c.causal = false;
  EXPECT_NE(error_of([&] { c.check(); }).find("rotary positions are for causal attention"),
            std::string::npos);
  c = tiny();
  c.n_embd = 18;
  EXPECT_NE(error_of([&] { TransformerBlock b(c); }).find("n_embd 18 is not divisible by n_head 4"),
            std::string::npos);
  c = tiny();
  c.norm_eps = 0;
  EXPECT_NE(error_of([&] { c.check(); }).find("norm_eps 0 must be positive"), std::string::npos);
  c = tiny();
  c.n_kv_head = 4;  // equal to n_head: fine
  EXPECT_NO_THROW(c.check());
}

TEST(TransformerConfig, FactoriesBuildTheKindsItNames) {
  TransformerConfig c = tiny();
  c.norm_eps = 1e-6, c.bias = false, c.mlp_hidden = 24, c.gelu_approximate = "none";
  auto ln = std::dynamic_pointer_cast<LayerNorm>(make_norm(c));
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->normalized_shape, Shape({16}));
  EXPECT_EQ(ln->options.eps, 1e-6);
  EXPECT_FALSE(ln->bias.defined());
  auto mlp = std::dynamic_pointer_cast<MLP>(make_feed_forward(c));
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(mlp->c_fc->out_features, 24);
  EXPECT_EQ(mlp->c_proj->in_features, 24);
  EXPECT_FALSE(mlp->c_fc->bias.defined());
  EXPECT_EQ(mlp->gelu->approximate, "none");
  EXPECT_EQ(make_feed_forward(tiny())->named_parameters()[0].second.shape(), Shape({64, 16}));
}

// forward is x + attn(ln_1(x)), then + mlp(ln_2(.)), and nothing else.
TEST(TransformerBlock, ForwardIsTheCompositionOfItsChildren) {
  manual_seed(1);
  TransformerBlock b(tiny());
  EXPECT_EQ(b.attn->type_name(), "CausalSelfAttention");
  Tensor x = randn({2, 5, 16});
  Tensor r = x + (*b.attn)((*b.ln_1)(x));
  Tensor want = r + (*b.mlp)((*b.ln_2)(r));
  EXPECT_TRUE(bit_equal(b(x), want));
  auto mlp = std::dynamic_pointer_cast<MLP>(b.mlp);
  Tensor h = (*b.ln_2)(r);
  EXPECT_TRUE(bit_equal((*b.mlp)(h), (*mlp->c_proj)(gelu_tanh((*mlp->c_fc)(h)))));
}

// Checkpointed, each block is one node and its input the only saved tensor; the loss and every
// gradient are the same bit for bit, dropout included. Without grad mode nothing is checkpointed.
TEST(TransformerStack, CheckpointingKeepsLossAndGradientsBitForBit) {
  auto grads = [](bool ckpt) {
    manual_seed(2);
    TransformerStack s(tiny(0.1), 3);
    LayerNorm norm(16);
    s.checkpointing = ckpt;
    manual_seed(3);
    Tensor x = randn({2, 6, 16}).requires_grad_(true), g = randn({2, 6, 16});
    Tensor y = s.forward(x, norm);
    EXPECT_STREQ(y.grad_fn()->name, "layer_norm");  // the final norm last
    if (ckpt) {
      EXPECT_STREQ(y.grad_fn()->next[0].node->name, "checkpoint");
    }
    sum(y * g).backward();
    std::vector<Tensor> out{y.detach(), x.grad()};
    for (const auto& p : s.parameters()) out.push_back(p.grad());
    return out;
  };
  auto plain = grads(false), ckpt = grads(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(bit_equal(plain[i], ckpt[i])) << i;
  TransformerStack s(tiny(), 2);
  s.checkpointing = true;
  NoGradGuard no_grad;
  EXPECT_EQ(s(randn({1, 3, 16})).grad_fn(), nullptr);
}

TEST(TransformerStack, KvCacheNeedsCausalAttentionAndOnePositionAfterThePrompt) {
  TransformerConfig c = tiny();
  c.causal = false;
  TransformerBlock full(c);
  KVCache cache;
  EXPECT_NE(error_of([&] {
              full.forward(randn({1, 3, 16}), cache, 0);
            }).find("causal"),
            std::string::npos);
  TransformerBlock causal(tiny());
  NoGradGuard no_grad;
  causal.forward(randn({1, 3, 16}), cache, 0);
  cache.length = 3;
  EXPECT_NE(error_of([&] {
              causal.forward(randn({1, 2, 16}), cache, 0);
            }).find("the input must be one position, got 2"),
            std::string::npos);
}
