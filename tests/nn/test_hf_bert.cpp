// BERT from Hugging Face folders (nn/hf_bert.h) against transformers itself: the fixtures of
// tests/nn/golden/hf/bert-mlm and bert-cls (scripts/make-hf-fixtures.py: a random
// BertForMaskedLM and a BertForSequenceClassification sharing its encoder, and transformers'
// float32 logits, losses and gradients on a batch whose row 1 is right-padded). Loading gives the
// same logits, losses and gradients; saving writes transformers' names and bytes back and reloads.
// Refusals and aliases: tests/nn/test_hf_bert_errors.cpp.
// Tolerances: Note [HF parity tolerances] in tests/nn/test_hf_gpt2.cpp (float32 end to end).
#include <gtest/gtest.h>

#include <iostream>
#include <map>

#include "autograd/ops/ops.h"
#include "nn/hf_bert.h"
#include "support/golden_file.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using loom::test::golden_dir;
using loom::test::read_bytes;
using loom::test::TempDir;

namespace {

std::string hf(const std::string& name) { return golden_dir() + "hf/" + name; }

const test::GoldenFile& expected() {
  static const test::GoldenFile g = test::read_golden_file(hf("bert.txt"));
  return g;
}

Tensor at64(const std::string& name) { return expected().at(name).to(kI64); }

// max |got - want| / max |want| (as test_hf_gpt2.cpp's).
double relative_error(const Tensor& got, const Tensor& want) {
  auto a = got.to_vector<double>(), b = want.to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

constexpr double kLogitsTol = 1e-5, kGradTol = 1e-4;

Tensor lengths() { return bert_lengths_from_mask(at64("attention_mask")); }

std::map<std::string, Tensor> params(const Module& m) {
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : m.named_parameters()) p[n] = t;
  return p;
}

// Rows [start, start + C) of a packed c_attn gradient: query 0, key C, value 2C.
Tensor rows(const Tensor& g, int64_t start, int64_t C) { return slice(g, 0, start, start + C); }

void expect_grads(const std::vector<std::pair<std::string, Tensor>>& grads,
                  const std::string& prefix) {
  for (const auto& [name, g] : grads)
    EXPECT_LT(relative_error(g, expected().at(prefix + "_grad." + name)), kGradTol) << name;
}

void expect_same_state(const Module& a, const Module& b) {
  auto x = a.state_dict(), y = b.state_dict();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].first, y[i].first);
    EXPECT_EQ(x[i].second.to_vector<double>(), y[i].second.to_vector<double>()) << x[i].first;
  }
}

}  // namespace

TEST(HfBert, ConfigMatchesTheFixture) {
  BertConfig c = bert_config_from_hf(HfConfig::read(hf("bert-mlm/config.json")));
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.hidden, 32);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.intermediate, 64);
  EXPECT_EQ(c.max_position, 64);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_EQ(c.norm_eps, 1e-12);
  EXPECT_EQ(c.dropout, 0.1);
  EXPECT_EQ(c.classifier_dropout, 0.1);  // null: the hidden dropout
  EXPECT_EQ(c.num_parameters(false), BertConfig::preset("tiny").num_parameters(false));
  EXPECT_EQ(bert_num_labels_from_hf(HfConfig::read(hf("bert-cls/config.json"))), 3);
}

TEST(HfBert, MaskedLMLogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_bert_for_masked_lm(hf("bert-mlm"));
  model->eval();  // the config's dropout 0.1; transformers' values are without it
  Tensor logits = model->forward(at64("ids"), at64("token_type_ids"), lengths());
  ASSERT_EQ(logits.shape(), expected().at("mlm_logits").shape());
  const double logits_err = relative_error(logits, expected().at("mlm_logits"));
  EXPECT_LT(logits_err, kLogitsTol);
  Tensor loss = model->loss(at64("ids"), at64("token_type_ids"), lengths(), at64("labels"));
  EXPECT_LT(relative_error(loss, expected().at("mlm_loss")), kLogitsTol);
  loss.backward();
  auto p = params(*model);
  expect_grads(
      {{"bert.embeddings.word_embeddings.weight",
        p.at("bert.word_embeddings.weight").grad()},  // the lookup and the decoder
       {"bert.embeddings.token_type_embeddings.weight",
        p.at("bert.token_type_embeddings.weight").grad()},
       {"bert.encoder.layer.0.attention.self.key.weight",
        rows(p.at("bert.layers.0.attn.c_attn.weight").grad(), 32, 32)},
       {"bert.encoder.layer.1.output.LayerNorm.weight", p.at("bert.layers.1.ln_2.weight").grad()},
       {"cls.predictions.bias", p.at("mlm_bias").grad()},
       {"cls.predictions.transform.dense.weight", p.at("transform.weight").grad()}},
      "mlm");
  std::cout << "[ parity   ] MLM logits " << logits_err << "\n";
}

TEST(HfBert, ClassifierLogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_bert_for_sequence_classification(hf("bert-cls"));
  model->eval();
  EXPECT_EQ(model->num_labels, 3);
  Tensor logits = model->forward(at64("ids"), at64("token_type_ids"), lengths());
  ASSERT_EQ(logits.shape(), expected().at("cls_logits").shape());
  EXPECT_LT(relative_error(logits, expected().at("cls_logits")), kLogitsTol);
  Tensor loss = model->loss(at64("ids"), at64("token_type_ids"), lengths(), at64("cls_labels"));
  EXPECT_LT(relative_error(loss, expected().at("cls_loss")), kLogitsTol);
  loss.backward();
  auto p = params(*model);
  expect_grads({{"bert.encoder.layer.0.attention.self.query.bias",
                 rows(p.at("bert.layers.0.attn.c_attn.bias").grad(), 0, 32)},
                {"bert.encoder.layer.1.intermediate.dense.weight",
                 p.at("bert.layers.1.mlp.c_fc.weight").grad()},
                {"bert.pooler.dense.weight", p.at("bert.pooler.weight").grad()},
                {"classifier.weight", p.at("classifier.weight").grad()}},
               "cls");
}

// Row 1 is padded after 6 tokens: without the lengths its valid positions change (transformers'
// values are with the mask), with them row 1 alone, unpadded, gives the same logits.
TEST(HfBert, PaddingLeavesTheValidPositionsUnchanged) {
  auto model = load_hf_bert_for_masked_lm(hf("bert-mlm"));
  model->eval();
  Tensor ids = at64("ids"), types = at64("token_type_ids");
  Tensor want = slice(select(expected().at("mlm_logits"), 0, 1), 0, 0, 6);  // (6, V)
  Tensor alone = model->forward(slice(slice(ids, 0, 1, 2), 1, 0, 6),
                                slice(slice(types, 0, 1, 2), 1, 0, 6), Tensor());
  EXPECT_LT(relative_error(select(alone, 0, 0), want), kLogitsTol);
  Tensor unmasked = model->forward(ids, types, Tensor());
  EXPECT_GT(relative_error(slice(select(unmasked, 0, 1), 0, 0, 6), want), 1e-3);
}

// The encoder alone: load_hf_bert reads a head model's folder, leaving the head out.
TEST(HfBert, EncoderLoadsFromAHeadModelsFolder) {
  auto mlm = load_hf_bert_for_masked_lm(hf("bert-mlm"));
  auto bert = load_hf_bert(hf("bert-cls"));  // bert-cls shares bert-mlm's encoder
  ASSERT_TRUE(bert->pooler);
  bert->eval(), mlm->eval();
  Tensor a = bert->forward(at64("ids"), at64("token_type_ids"), lengths());
  Tensor b = mlm->bert->forward(at64("ids"), at64("token_type_ids"), lengths());
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
}

// Saving writes the fixture's bytes (transformers' save_pretrained: the same names, order and
// float32 values, no tied decoder) and reloading gives the same parameters.
TEST(HfBert, SaveWritesTransformersBytesAndReloads) {
  for (const char* name : {"bert-mlm", "bert-cls"}) {
    TempDir dir("loom_hf_bert");
    const bool mlm = std::string(name) == "bert-mlm";
    if (mlm) {
      auto model = load_hf_bert_for_masked_lm(hf(name));
      save_hf_bert(*model, dir.path);
      expect_same_state(*model, *load_hf_bert_for_masked_lm(dir.path));
    } else {
      auto model = load_hf_bert_for_sequence_classification(hf(name));
      save_hf_bert(*model, dir.path);
      expect_same_state(*model, *load_hf_bert_for_sequence_classification(dir.path));
    }
    EXPECT_TRUE(read_bytes(dir.file("model.safetensors")) ==
                read_bytes(hf(std::string(name) + "/model.safetensors")))
        << name;
    HfConfig mine = HfConfig::read(dir.file("config.json"));
    HfConfig theirs = HfConfig::read(hf(std::string(name) + "/config.json"));
    for (const char* key :
         {"architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
          "intermediate_size", "vocab_size", "layer_norm_eps", "hidden_act", "type_vocab_size",
          "max_position_embeddings", "hidden_dropout_prob", "attention_probs_dropout_prob",
          "tie_word_embeddings", "dtype", "id2label", "label2id", "problem_type"})
      EXPECT_EQ(mine.text(key), theirs.text(key)) << name << " " << key;
  }
}

// A BertModel folder has no prefix and no head; it round-trips too.
TEST(HfBert, EncoderSavesAsBertModelAndReloads) {
  manual_seed(4);
  Bert model(BertConfig::preset("tiny"), /*pooler=*/true);
  TempDir dir("loom_hf_bert_model");
  save_hf_bert(model, dir.path);
  HfCheckpoint ckpt(dir.path);
  EXPECT_TRUE(ckpt.contains("embeddings.word_embeddings.weight"));
  EXPECT_TRUE(ckpt.contains("encoder.layer.1.attention.self.value.bias"));
  EXPECT_TRUE(ckpt.contains("pooler.dense.weight"));
  EXPECT_EQ(ckpt.names().size(), size_t(5 + 2 * 16 + 2));
  auto back = load_hf_bert(dir.path);
  expect_same_state(model, *back);
}
