// BERT's config fields and tensor names (nn/hf_bert.h) on top of the generic load and save of
// nn/hf_checkpoint.cpp. Leaves out: config fields that change nothing in loom's model
// (initializer_range, pad_token_id: the embedding row is trained like any other in loom,
// use_cache, chunk_size_feed_forward: a way of splitting the same products).
#include "nn/hf_bert.h"

#include <cstring>
#include <nlohmann/json.hpp>

namespace loom::nn {

namespace {

// The fields whose values loom's BERT has no switch for: each must hold BERT's value.
void refuse_unsupported(const HfConfig& c) {
  c.check_model_type("bert", "loom's BERT reads BERT folders");
  LOOM_CHECK(c.string("hidden_act", "gelu") == "gelu", c.where("hidden_act"),
             "; loom's BERT uses the exact erf GELU (\"gelu\")");
  LOOM_CHECK(c.string("position_embedding_type", "absolute") == "absolute",
             c.where("position_embedding_type"),
             "; loom's BERT has learned absolute positions (\"absolute\")");
  for (const char* key : {"is_decoder", "add_cross_attention"})
    LOOM_CHECK(!c.boolean(key, false), c.where(key), "; loom's BERT is an encoder only");
  LOOM_CHECK(c.boolean("tie_word_embeddings", true), c.where("tie_word_embeddings"),
             "; loom's BERT ties the MLM decoder to the word embeddings");
}

// transformers' names of a LayerNorm's weight and bias, and those of folders written before
// PyTorch named them so (gamma and beta, as TensorFlow's).
std::string legacy_name(const std::string& name) {
  for (const auto& [now, old] : {std::pair{".LayerNorm.weight", ".LayerNorm.gamma"},
                                 std::pair{".LayerNorm.bias", ".LayerNorm.beta"}})
    if (name.ends_with(now)) return name.substr(0, name.size() - std::strlen(now)) + old;
  return name;
}

// The map with each LayerNorm entry renamed to its legacy name where only that is in the folder.
HfTensorMap with_folder_names(HfTensorMap map, const HfCheckpoint& ckpt) {
  for (HfTensor& m : map)
    if (!ckpt.contains(m.hf_name) && ckpt.contains(legacy_name(m.hf_name)))
      m.hf_name = legacy_name(m.hf_name);
  return map;
}

// Tensors of a folder that no loom BERT holds: the position_ids buffer of older transformers, the
// tied decoder, BertForPreTraining's next-sentence head.
bool never_loaded(const std::string& name) {
  return name.ends_with("embeddings.position_ids") ||
         name.starts_with("cls.predictions.decoder.") || name.starts_with("cls.seq_relationship.");
}

void load(Module& model, const HfCheckpoint& ckpt, const HfTensorMap& map,
          const std::function<bool(const std::string&)>& also_ignore = nullptr) {
  auto ignore = [&](const std::string& name) {
    return never_loaded(name) || (also_ignore && also_ignore(name));
  };
  load_hf_tensors(model, ckpt, with_folder_names(map, ckpt), ignore);
}

}  // namespace

BertConfig bert_config_from_hf(const HfConfig& c) {
  BertConfig b;
  b.vocab_size = c.integer("vocab_size");
  b.hidden = c.integer("hidden_size");
  b.n_layers = c.integer("num_hidden_layers");
  b.n_heads = c.integer("num_attention_heads");
  b.intermediate = c.integer("intermediate_size");
  b.max_position = c.integer("max_position_embeddings", 512);
  b.type_vocab_size = c.integer("type_vocab_size", 2);
  b.norm_eps = c.number("layer_norm_eps", 1e-12);
  refuse_unsupported(c);
  b.dropout = c.same_number({"hidden_dropout_prob", "attention_probs_dropout_prob"}, 0.1,
                            "loom's BERT block has one dropout rate");
  b.classifier_dropout = c.number("classifier_dropout", b.dropout);
  b.check();
  return b;
}

int64_t bert_num_labels_from_hf(const HfConfig& c) {
  const std::string problem = c.string("problem_type", "single_label_classification");
  LOOM_CHECK(problem == "single_label_classification", c.where("problem_type"),
             "; loom's BertForSequenceClassification does single-label classification");
  const int64_t n =
      c.has("id2label") ? int64_t(c.object("id2label").keys().size()) : c.integer("num_labels", 2);
  LOOM_CHECK(n >= 2, c.where(c.has("id2label") ? "id2label" : "num_labels"),
             "; loom's BertForSequenceClassification needs 2 labels or more (transformers "
             "regresses with one)");
  return n;
}

std::string hf_bert_config_json(const BertConfig& b, DType dtype, const std::string& architecture,
                                int64_t num_labels) {
  nlohmann::ordered_json j;
  j["add_cross_attention"] = false;
  j["architectures"] = {architecture};
  j["attention_probs_dropout_prob"] = b.dropout;
  j["classifier_dropout"] = b.classifier_dropout;
  j["dtype"] = torch_dtype_name(dtype);  // transformers 5 reads this, 4 the next
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["hidden_act"] = "gelu";
  j["hidden_dropout_prob"] = b.dropout;
  j["hidden_size"] = b.hidden;
  if (num_labels > 0) {
    nlohmann::ordered_json id2label, label2id;
    for (int64_t i = 0; i < num_labels; ++i) {
      id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
      label2id["LABEL_" + std::to_string(i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
    j["problem_type"] = "single_label_classification";
  }
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = b.intermediate;
  j["is_decoder"] = false;
  j["layer_norm_eps"] = b.norm_eps;
  j["max_position_embeddings"] = b.max_position;
  j["model_type"] = "bert";
  j["num_attention_heads"] = b.n_heads;
  j["num_hidden_layers"] = b.n_layers;
  j["pad_token_id"] = 0;
  j["position_embedding_type"] = "absolute";
  j["tie_word_embeddings"] = true;
  j["type_vocab_size"] = b.type_vocab_size;
  j["use_cache"] = true;
  j["vocab_size"] = b.vocab_size;
  return j.dump(2) + "\n";
}

// In transformers' state_dict order (embeddings, each layer, pooler), so shards are filled alike.
HfTensorMap hf_bert_tensor_map(const BertConfig& cfg, bool pooler, const std::string& hf_prefix,
                               const std::string& loom_prefix) {
  const int64_t C = cfg.hidden;
  HfTensorMap map;
  auto add = [&](const std::string& hf, const std::string& loom, int64_t start = 0,
                 int64_t rows = -1) {
    map.push_back({hf_prefix + hf, loom_prefix + loom, false, start, rows});
  };
  auto linear = [&](const std::string& hf, const std::string& loom) {
    add(hf + ".weight", loom + ".weight");
    add(hf + ".bias", loom + ".bias");
  };
  for (const char* e : {"word_embeddings", "position_embeddings", "token_type_embeddings"})
    add(std::string("embeddings.") + e + ".weight", std::string(e) + ".weight");
  linear("embeddings.LayerNorm", "embeddings_norm");
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    const std::string hf = "encoder.layer." + std::to_string(i) + ".";
    const std::string l = "layers." + std::to_string(i) + ".";
    int64_t start = 0;
    for (const char* part : {"query", "key", "value"}) {  // rows of c_attn: q, then k, then v
      add(hf + "attention.self." + part + ".weight", l + "attn.c_attn.weight", start, C);
      add(hf + "attention.self." + part + ".bias", l + "attn.c_attn.bias", start, C);
      start += C;
    }
    linear(hf + "attention.output.dense", l + "attn.c_proj");
    linear(hf + "attention.output.LayerNorm", l + "ln_1");
    linear(hf + "intermediate.dense", l + "mlp.c_fc");
    linear(hf + "output.dense", l + "mlp.c_proj");
    linear(hf + "output.LayerNorm", l + "ln_2");
  }
  if (pooler) linear("pooler.dense", "pooler");
  return map;
}

HfTensorMap hf_bert_tensor_map(const BertForMaskedLM& model) {
  HfTensorMap map = hf_bert_tensor_map(model.bert->config, false, "bert.", "bert.");
  map.push_back({"cls.predictions.bias", "mlm_bias"});
  map.push_back({"cls.predictions.transform.dense.weight", "transform.weight"});
  map.push_back({"cls.predictions.transform.dense.bias", "transform.bias"});
  map.push_back({"cls.predictions.transform.LayerNorm.weight", "transform_norm.weight"});
  map.push_back({"cls.predictions.transform.LayerNorm.bias", "transform_norm.bias"});
  return map;
}

HfTensorMap hf_bert_tensor_map(const BertForSequenceClassification& model) {
  HfTensorMap map = hf_bert_tensor_map(model.bert->config, true, "bert.", "bert.");
  map.push_back({"classifier.weight", "classifier.weight"});
  map.push_back({"classifier.bias", "classifier.bias"});
  return map;
}

ModuleHolder<Bert> load_hf_bert(const std::string& dir, Device device, DType dtype) {
  HfCheckpoint ckpt(dir);
  // BertModel's names have no prefix; its heads' models put it under "bert.".
  const bool nested = ckpt.contains("bert.embeddings.word_embeddings.weight");
  const std::string prefix = nested ? "bert." : "";
  const bool pooler = ckpt.contains(prefix + "pooler.dense.weight");
  auto model = make<Bert>(bert_config_from_hf(ckpt.config()), pooler);
  model->to(device, dtype);
  auto head = [&](const std::string& name) { return nested && !name.starts_with("bert."); };
  load(*model, ckpt, hf_bert_tensor_map(model->config, pooler, prefix, ""), head);
  return model;
}

ModuleHolder<BertForMaskedLM> load_hf_bert_for_masked_lm(const std::string& dir, Device device,
                                                         DType dtype) {
  HfCheckpoint ckpt(dir);
  auto model = make<BertForMaskedLM>(bert_config_from_hf(ckpt.config()));
  model->to(device, dtype);
  // BertForPreTraining's folders (bert-base-uncased) also hold the pooler, unused by the MLM.
  auto pooler = [](const std::string& name) { return name.starts_with("bert.pooler."); };
  load(*model, ckpt, hf_bert_tensor_map(*model), pooler);
  return model;
}

ModuleHolder<BertForSequenceClassification> load_hf_bert_for_sequence_classification(
    const std::string& dir, Device device, DType dtype) {
  HfCheckpoint ckpt(dir);
  auto model = make<BertForSequenceClassification>(bert_config_from_hf(ckpt.config()),
                                                   bert_num_labels_from_hf(ckpt.config()));
  model->to(device, dtype);
  load(*model, ckpt, hf_bert_tensor_map(*model));
  return model;
}

void save_hf_bert(const Bert& model, const std::string& dir, const HfSaveOptions& options) {
  const DType dtype = options.dtype.value_or(model.word_embeddings->weight.dtype());
  save_hf_tensors(model, hf_bert_tensor_map(model.config, bool(model.pooler), "", ""),
                  hf_bert_config_json(model.config, dtype, "BertModel"), dir, options);
}

void save_hf_bert(const BertForMaskedLM& model, const std::string& dir,
                  const HfSaveOptions& options) {
  const DType dtype = options.dtype.value_or(model.mlm_bias.dtype());
  save_hf_tensors(model, hf_bert_tensor_map(model),
                  hf_bert_config_json(model.bert->config, dtype, "BertForMaskedLM"), dir, options);
}

void save_hf_bert(const BertForSequenceClassification& model, const std::string& dir,
                  const HfSaveOptions& options) {
  const DType dtype = options.dtype.value_or(model.classifier->weight.dtype());
  save_hf_tensors(model, hf_bert_tensor_map(model),
                  hf_bert_config_json(model.bert->config, dtype, "BertForSequenceClassification",
                                      model.num_labels),
                  dir, options);
}

}  // namespace loom::nn
