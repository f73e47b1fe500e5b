// nn::Bert (nn/bert.h) and the post-norm block it is made of (Note [Post-norm] in
// nn/transformer.h): the presets' published parameter counts without allocating them, the
// constructor's shapes against the config's list, the encoder against a float64 oracle that runs
// each row unpadded with primitive ops and a host erf GELU, padding that leaves the valid
// positions unchanged, checkpointing, nn::fuse leaving it plain, the heads' shapes and losses, and
// attention masks turned into lengths. Leaves out: parity with transformers (the Hugging Face
// tests, test_hf_bert*.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/bert.h"
#include "nn/fuse.h"
#include "nn/fuse_transformer.h"
#include "nn/fused.h"

using namespace loom;
using namespace loom::nn;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// tiny with 2 layers of C 16 and every weight random (norms around 1), in float64.
ModuleHolder<Bert> random_bert(bool pooler = true) {
  BertConfig c = BertConfig::preset("tiny");
  c.hidden = 16, c.n_heads = 2, c.intermediate = 24, c.vocab_size = 30, c.max_position = 12;
  manual_seed(5);
  auto m = make<Bert>(c, pooler);
  m->to(kF64);
  NoGradGuard g;
  for (auto& [name, p] : m->named_parameters()) {
    const bool norm_weight = p.dim() == 1 && name.ends_with("weight");
    p.copy_(randn(p.shape(), {.dtype = kF64}) * 0.3 + (norm_weight ? 1.0 : 0.0));
  }
  m->eval();
  return m;
}

// --- the float64 oracle: primitive ops, one row at a time without padding

Tensor ln(const Tensor& x, const LayerNorm& n, double eps) {  // (..., C)
  Tensor mu = mean(x, {-1}, true), d = x - mu;
  return d * rsqrt(mean(d * d, {-1}, true) + eps) * n.weight + n.bias;
}

Tensor gelu_erf(const Tensor& x) {  // on the host, std::erf
  auto v = x.contiguous().to_vector<double>();
  for (double& e : v) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
  return from_vector<double>(v, x.shape());
}

Tensor lin(const Tensor& x, const Linear& l) {
  return matmul(x, transpose(l.weight, 0, 1)) + l.bias;
}

// x (T, C) -> one post-norm block without any mask.
Tensor block_ref(const TransformerBlock& b, const Tensor& x, int64_t H, double eps) {
  const int64_t C = x.size(1), D = C / H;
  Tensor qkv = lin(x, *b.attn->c_attn);  // (T, 3C)
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    Tensor q = slice(qkv, 1, h * D, (h + 1) * D), k = slice(qkv, 1, C + h * D, C + (h + 1) * D),
           v = slice(qkv, 1, 2 * C + h * D, 2 * C + (h + 1) * D);
    heads.push_back(matmul(softmax(matmul(q, transpose(k, 0, 1)) / std::sqrt(double(D)), -1), v));
  }
  Tensor a = lin(cat(heads, 1), *b.attn->c_proj);
  const auto& ln_1 = dynamic_cast<const LayerNorm&>(*b.ln_1);
  const auto& ln_2 = dynamic_cast<const LayerNorm&>(*b.ln_2);
  const auto& mlp = dynamic_cast<const MLP&>(*b.mlp);
  Tensor r = ln(x + a, ln_1, eps);
  return ln(r + lin(gelu_erf(lin(r, *mlp.c_fc)), *mlp.c_proj), ln_2, eps);
}

// Row b of ids/types, its first n positions: (n, C).
Tensor bert_ref(const Bert& m, const Tensor& ids, const Tensor& types, int64_t b, int64_t n) {
  Tensor i = slice(select(ids, 0, b), 0, 0, n), t = slice(select(types, 0, b), 0, 0, n);
  Tensor pos = arange(0.0, double(n), 1.0, {.dtype = kI64});
  Tensor x = index_select(m.word_embeddings->weight, 0, i) +
             index_select(m.position_embeddings->weight, 0, pos) +
             index_select(m.token_type_embeddings->weight, 0, t);
  x = ln(x, *m.embeddings_norm, m.config.norm_eps);
  for (size_t l = 0; l < m.layers->size(); ++l)
    x = block_ref(*m.layers->block(l), x, m.config.n_heads, m.config.norm_eps);
  return x;
}

}  // namespace

TEST(BertConfig, PresetsHaveThePublishedParameterCounts) {
  // bert-base-uncased's BertModel (with its pooler) has 109,482,240 parameters.
  EXPECT_EQ(BertConfig::preset("bert-base").num_parameters(), 109482240);
  EXPECT_EQ(BertConfig::preset("bert-large").num_parameters(), 335141888);
  EXPECT_EQ(BertConfig::preset("bert-base").num_parameters(false), 109482240 - 768 * 769);
  EXPECT_NE(error_of([] { BertConfig::preset("bert-huge"); }).find("bert-base, bert-large"),
            std::string::npos);
}

TEST(BertConfig, ParameterShapesAreTheConstructors) {
  for (bool pooler : {true, false}) {
    BertConfig c = BertConfig::preset("tiny");
    Bert m(c, pooler);
    auto want = c.parameter_shapes(pooler);
    auto got = m.named_parameters();
    ASSERT_EQ(got.size(), want.size()) << "pooler " << pooler;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first);
      EXPECT_EQ(got[i].second.shape(), want[i].second) << want[i].first;
    }
    EXPECT_EQ(m.num_parameters(), c.num_parameters(pooler));
  }
}

// Row 0 full, row 1 padded after 4 tokens with junk ids: each row's valid positions equal the
// oracle run on that row alone.
TEST(Bert, MatchesAFloat64OracleRowByRowWithPadding) {
  auto m = random_bert();
  Tensor ids = from_vector<int64_t>({3, 7, 1, 9, 2, 8, 5, 4, 11, 6, 0, 29, 17, 13}, {2, 7});
  Tensor types = from_vector<int64_t>({0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1}, {2, 7});
  Tensor lengths = from_vector<int64_t>({7, 4}, {2});
  Tensor h = m->forward(ids, types, lengths);  // (2, 7, 16)
  EXPECT_LT(max_abs_diff(select(h, 0, 0), bert_ref(*m, ids, types, 0, 7)), 1e-12);
  EXPECT_LT(max_abs_diff(slice(select(h, 0, 1), 0, 0, 4), bert_ref(*m, ids, types, 1, 4)), 1e-12);
  // Without the lengths the padding is attended to, and row 1 changes.
  Tensor unmasked = m->forward(ids, types, Tensor());
  EXPECT_GT(max_abs_diff(slice(select(unmasked, 0, 1), 0, 0, 4), bert_ref(*m, ids, types, 1, 4)),
            1e-3);
  // The pooler: tanh(dense(h[:, 0])).
  Tensor pooled = m->pool(h);
  Tensor want = tanh(lin(select(h, 1, 0), *m->pooler));
  EXPECT_LT(max_abs_diff(pooled, want), 1e-14);
}

TEST(Bert, PaddingLeavesTheValidPositionsAsTheUnpaddedRow) {
  auto m = random_bert();
  m->to(kF32);
  Tensor ids = from_vector<int64_t>({3, 7, 1, 9, 12, 19, 28, 4}, {1, 8});
  Tensor alone = m->forward(slice(ids, 1, 0, 5), Tensor(), Tensor());
  Tensor padded = m->forward(ids, Tensor(), from_vector<int32_t>({5}, {1}));
  // float32: the same products in a longer row, sums of 16-24 terms reordered at most.
  EXPECT_LT(max_abs_diff(slice(padded, 1, 0, 5), alone), 1e-5);
}

TEST(Bert, CheckpointingKeepsValuesAndGradients) {
  auto m = random_bert();
  Tensor ids = from_vector<int64_t>({3, 7, 1, 9, 2, 8}, {2, 3});
  Tensor lengths = from_vector<int64_t>({3, 2}, {2});
  auto run = [&](bool ckpt) {
    m->layers->checkpointing = ckpt;
    m->zero_grad();
    Tensor h = m->forward(ids, Tensor(), lengths);
    (h * h).sum().backward();
    return std::pair{h.detach(), m->layers->block(0)->attn->c_attn->weight.grad().clone()};
  };
  auto [h1, g1] = run(false);
  auto [h2, g2] = run(true);
  EXPECT_EQ(max_abs_diff(h1, h2), 0.0);
  EXPECT_LT(max_abs_diff(g1, g2), 1e-12);
  EXPECT_GT(max(abs(g1)).item(), 0.0);
}

// nn::fuse leaves post-norm blocks plain (Note [Post-norm] in nn/transformer.h); naming the
// stack fuses nothing either, and the outputs stay the same.
TEST(Bert, FuseLeavesItPlain) {
  auto m = random_bert(/*pooler=*/false);
  auto mlm = make<BertForMaskedLM>(m->config);
  mlm->to(kF64);
  mlm->bert->load_state_dict(m->state_dict());
  mlm->eval();
  Tensor ids = from_vector<int64_t>({3, 7, 1, 9, 2, 8}, {2, 3});
  Tensor before = mlm->forward(ids);
  EXPECT_EQ(fusion_summary(fuse(*mlm)), "nn::fuse: nothing to fuse");
  ModuleHolder<Module> none = make<Identity>();
  EXPECT_TRUE(fuse_transformer(*mlm->bert, mlm->bert->layers, none).empty());
  EXPECT_EQ(mlm->bert->layers->block(0)->type_name(), "TransformerBlock");
  EXPECT_EQ(max_abs_diff(mlm->forward(ids), before), 0.0);
}

// The MLM decoder is the word embeddings' matrix (one tensor), plus its own bias; the
// classifier's logits come from the pooled [CLS]. Losses: cross-entropy with -100 ignored.
TEST(Bert, HeadsAndLosses) {
  BertConfig c = BertConfig::preset("tiny");
  BertForMaskedLM mlm(c);
  mlm.eval();  // no dropout: forward and loss see the same logits
  EXPECT_EQ(mlm.named_parameters().size(), c.parameter_shapes(false).size() + 5);
  Tensor ids = from_vector<int64_t>({3, 7, 1, 9, 2, 8}, {2, 3});
  Tensor logits = mlm.forward(ids);
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 100}));
  Tensor labels = from_vector<int64_t>({-100, 5, -100, 7, -100, -100}, {2, 3});
  Tensor flat = reshape(logits, {6, 100});
  Tensor lp = log_softmax(flat, -1);
  double want = -(lp.to_vector<double>()[1 * 100 + 5] + lp.to_vector<double>()[3 * 100 + 7]) / 2;
  EXPECT_NEAR(mlm.loss(ids, Tensor(), Tensor(), labels).item(), want, 1e-5);

  BertForSequenceClassification cls(c, 3);
  Tensor y = cls.forward(ids, Tensor(), from_vector<int64_t>({3, 1}, {2}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_NE(error_of([&] {
              cls.loss(ids, Tensor(), Tensor(), from_vector<int64_t>({1}, {1}));
            }).find("labels"),
            std::string::npos);
  EXPECT_NE(error_of([&] { mlm.bert->pool(logits); }).find("without a pooler"), std::string::npos);
}

TEST(Bert, LengthsFromAttentionMask) {
  Tensor mask = from_vector<int64_t>({1, 1, 1, 1, 1, 0, 0, 0}, {2, 4});
  EXPECT_EQ(bert_lengths_from_mask(mask).to_vector<int64_t>(), (std::vector<int64_t>{4, 1}));
  std::string m = error_of([] { bert_lengths_from_mask(from_vector<int64_t>({0, 1, 1}, {1, 3})); });
  EXPECT_NE(m.find("row 0 of attention_mask"), std::string::npos) << m;
  m = error_of([] { bert_lengths_from_mask(from_vector<int64_t>({1, 1, 1, 0, 0, 0}, {2, 3})); });
  EXPECT_NE(m.find("row 1"), std::string::npos) << m;
  m = error_of([] { bert_lengths_from_mask(from_vector<float>({1, 1}, {1, 2})); });
  EXPECT_NE(m.find("integers or bools"), std::string::npos) << m;
}

TEST(Bert, BadInputsAreNamed) {
  Bert m(BertConfig::preset("tiny"));
  std::string e = error_of([&] { m.forward(zeros({2, 3}, {.dtype = kF32})); });
  EXPECT_NE(e.find("input_ids"), std::string::npos) << e;
  e = error_of([&] { m.forward(zeros({1, 65}, {.dtype = kI64})); });
  EXPECT_NE(e.find("exceed max_position 64"), std::string::npos) << e;
  e = error_of([&] {
    m.forward(zeros({2, 3}, {.dtype = kI64}), zeros({2, 4}, {.dtype = kI64}), Tensor());
  });
  EXPECT_NE(e.find("token_type_ids"), std::string::npos) << e;
}
