// What nn/hf_bert.h refuses and what it reads besides save_pretrained's folders: config fields
// loom's BERT cannot do are errors naming the file and the field; old folders' LayerNorm.gamma /
// .beta names load as .weight / .bias; a BertForPreTraining folder (bert-base-uncased's layout:
// pooler, next-sentence head, position_ids buffer, the decoder stored) loads into the MLM model;
// a missing or extra tensor is named. The folders are the fixtures of tests/nn/golden/hf/bert-*
// rewritten with loom's safetensors writer.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "autograd/ops/ops.h"
#include "nn/hf_bert.h"
#include "nn/serialize.h"
#include "support/golden_file.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using loom::test::golden_dir;
using loom::test::read_bytes;
using loom::test::TempDir;

namespace {

std::string hf(const std::string& name) { return golden_dir() + "hf/" + name; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The fixture `name` rewritten into dir: config.json with `from` replaced by `to`, each tensor
// renamed by `rename` (an empty name drops it), `extra` tensors added.
void rewrite(const TempDir& dir, const std::string& name, const std::string& from,
             const std::string& to,
             const std::function<std::string(const std::string&)>& rename = nullptr,
             const NamedTensors& extra = {}) {
  std::string text = read_bytes(hf(name + "/config.json"));
  if (!from.empty()) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  }
  test::write_bytes(dir.file("config.json"), text);
  NamedTensors out;
  for (const auto& [n, t] : load_safetensors(hf(name + "/model.safetensors")).tensors) {
    const std::string m = rename ? rename(n) : n;
    if (!m.empty()) out.push_back({m, t});
  }
  for (const auto& e : extra) out.push_back(e);
  save_safetensors(dir.file("model.safetensors"), out, {{"format", "pt"}});
}

void expect_same_state(const Module& a, const Module& b) {
  auto x = a.state_dict(), y = b.state_dict();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(x[i].second.to_vector<double>(), y[i].second.to_vector<double>()) << x[i].first;
}

std::string replace_end(const std::string& s, const std::string& from, const std::string& to) {
  return s.ends_with(from) ? s.substr(0, s.size() - from.size()) + to : s;
}

}  // namespace

TEST(HfBertErrors, RefusesWhatLoomCannotDoNamingTheField) {
  struct Case {
    std::string from, to, field;
  };
  std::vector<Case> cases = {
      {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu_new\"", "hidden_act"},
      {"\"is_decoder\": false", "\"is_decoder\": true", "is_decoder"},
      {"\"add_cross_attention\": false", "\"add_cross_attention\": true", "add_cross_attention"},
      {"\"model_type\": \"bert\"", "\"model_type\": \"roberta\"", "model_type"},
      {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings"},
      {"\"layer_norm_eps\"", "\"position_embedding_type\": \"relative_key\", \"layer_norm_eps\"",
       "position_embedding_type"}};
  for (const auto& c : cases) {
    TempDir dir("loom_hf_bert_bad");
    rewrite(dir, "bert-mlm", c.from, c.to);
    std::string e = error_of([&] { load_hf_bert_for_masked_lm(dir.path); });
    EXPECT_NE(e.find("field \"" + c.field + "\""), std::string::npos) << e;
    EXPECT_NE(e.find(dir.file("config.json")), std::string::npos) << e;
  }
  TempDir dir("loom_hf_bert_dropout");
  rewrite(dir, "bert-mlm", "\"hidden_dropout_prob\": 0.1", "\"hidden_dropout_prob\": 0.2");
  std::string e = error_of([&] { load_hf_bert_for_masked_lm(dir.path); });
  EXPECT_NE(e.find("hidden_dropout_prob 0.2 and attention_probs_dropout_prob 0.1"),
            std::string::npos)
      << e;
}

TEST(HfBertErrors, ClassifierRefusesRegressionAndMultiLabel) {
  TempDir dir("loom_hf_bert_problem");
  rewrite(dir, "bert-cls", "\"single_label_classification\"", "\"multi_label_classification\"");
  std::string e = error_of([&] { load_hf_bert_for_sequence_classification(dir.path); });
  EXPECT_NE(e.find("field \"problem_type\""), std::string::npos) << e;
  TempDir one("loom_hf_bert_one_label");
  rewrite(one, "bert-mlm", "\"hidden_act\"", "\"num_labels\": 1, \"hidden_act\"");
  e = error_of([&] { bert_num_labels_from_hf(HfConfig::read(one.file("config.json"))); });
  EXPECT_NE(e.find("field \"num_labels\" is 1"), std::string::npos) << e;
}

// Folders written before PyTorch's LayerNorm names hold LayerNorm.gamma and LayerNorm.beta.
TEST(HfBertErrors, LegacyGammaBetaNamesLoad) {
  TempDir dir("loom_hf_bert_gamma");
  rewrite(dir, "bert-mlm", "", "", [](const std::string& n) {
    return replace_end(replace_end(n, "LayerNorm.weight", "LayerNorm.gamma"), "LayerNorm.bias",
                       "LayerNorm.beta");
  });
  EXPECT_TRUE(HfCheckpoint(dir.path).contains("bert.embeddings.LayerNorm.gamma"));
  expect_same_state(*load_hf_bert_for_masked_lm(dir.path),
                    *load_hf_bert_for_masked_lm(hf("bert-mlm")));
}

// bert-base-uncased's folder is BertForPreTraining's: a pooler and a next-sentence head beside
// the MLM head, the decoder's weight and bias stored, and (older transformers) position_ids.
TEST(HfBertErrors, PreTrainingFolderLoadsIntoTheMaskedLM) {
  TempDir dir("loom_hf_bert_pretraining");
  auto cls = load_safetensors(hf("bert-cls/model.safetensors"));
  auto mlm = load_safetensors(hf("bert-mlm/model.safetensors"));
  NamedTensors extra{
      {"bert.pooler.dense.weight", cls.at("bert.pooler.dense.weight")},
      {"bert.pooler.dense.bias", cls.at("bert.pooler.dense.bias")},
      {"cls.seq_relationship.weight", zeros({2, 32})},
      {"cls.seq_relationship.bias", zeros({2})},
      {"cls.predictions.decoder.weight", mlm.at("bert.embeddings.word_embeddings.weight")},
      {"cls.predictions.decoder.bias", mlm.at("cls.predictions.bias")},
      {"bert.embeddings.position_ids", arange(0.0, 64.0, 1.0, {.dtype = kI64}).view({1, 64})}};
  rewrite(dir, "bert-mlm", "", "", nullptr, extra);
  expect_same_state(*load_hf_bert_for_masked_lm(dir.path),
                    *load_hf_bert_for_masked_lm(hf("bert-mlm")));
  auto encoder = load_hf_bert(dir.path);  // the encoder with the pooler, heads ignored
  EXPECT_TRUE(encoder->pooler);
}

TEST(HfBertErrors, MissingAndExtraTensorsAreNamed) {
  TempDir missing("loom_hf_bert_missing");
  rewrite(missing, "bert-mlm", "", "", [](const std::string& n) {
    return n == "bert.encoder.layer.1.attention.self.value.bias" ? std::string() : n;
  });
  std::string e = error_of([&] { load_hf_bert_for_masked_lm(missing.path); });
  EXPECT_NE(e.find("'bert.encoder.layer.1.attention.self.value.bias'"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  // The classifier's folder into the MLM model: no MLM head.
  e = error_of([&] { load_hf_bert_for_masked_lm(hf("bert-cls")); });
  EXPECT_NE(e.find("'cls.predictions."), std::string::npos) << e;
  // An extra tensor is named.
  TempDir extra("loom_hf_bert_extra");
  rewrite(extra, "bert-mlm", "", "", nullptr,
          {{"bert.encoder.layer.2.output.dense.bias", zeros({32})}});
  e = error_of([&] { load_hf_bert_for_masked_lm(extra.path); });
  EXPECT_NE(e.find("'bert.encoder.layer.2.output.dense.bias'"), std::string::npos) << e;
  EXPECT_NE(e.find("is not one the model has"), std::string::npos) << e;
  // The MLM's folder into the classifier: no pooler.
  e = error_of([&] { load_hf_bert_for_sequence_classification(hf("bert-mlm")); });
  EXPECT_NE(e.find("bert.pooler.dense"), std::string::npos) << e;
}
