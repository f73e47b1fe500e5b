// BERT in Hugging Face folders: loom's Bert, BertForMaskedLM and BertForSequenceClassification
// (nn/bert.h) from folders transformers wrote (BertModel, BertForMaskedLM,
// BertForSequenceClassification, BertForPreTraining as bert-base-uncased is: its heads are left
// out) and back. The config fields map to BertConfig and what loom's BERT cannot do is refused
// naming the field; the tensor names are transformers', query/key/value packed into c_attn's rows
// (docs/bert.md has the table). Old folders' LayerNorm.gamma / .beta are read as .weight /
// .bias. Leaves out: tokenizers, the next-sentence head, and the generic parts
// (nn/hf_checkpoint.h).
#pragma once

#include <string>

#include "nn/bert.h"
#include "nn/hf_checkpoint.h"

namespace loom::nn {

// config.json -> BertConfig: vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size, max_position_embeddings, type_vocab_size, layer_norm_eps, the dropouts
// (hidden_dropout_prob and attention_probs_dropout_prob must agree: loom's block has one rate;
// classifier_dropout, the hidden one when null). Refused with an error naming the file, the field
// and its value: model_type other than "bert", hidden_act other than "gelu" (the exact erf GELU),
// position_embedding_type other than "absolute", is_decoder, add_cross_attention,
// tie_word_embeddings false.
BertConfig bert_config_from_hf(const HfConfig& c);
// The classifier's label count: id2label's size, else num_labels, else 2 (transformers'
// default). Refused: a problem_type other than single_label_classification, and one label
// (transformers then regresses with a mean squared error).
int64_t bert_num_labels_from_hf(const HfConfig& c);

// The config.json transformers writes for `architecture` ("BertModel", "BertForMaskedLM" or
// "BertForSequenceClassification", num_labels > 0 for the last) with these sizes, dtype `dtype`.
std::string hf_bert_config_json(const BertConfig& c, DType dtype, const std::string& architecture,
                                int64_t num_labels = 0);

// The encoder's entries: <hf_prefix>embeddings.{word,position,token_type}_embeddings.weight,
// embeddings.LayerNorm, encoder.layer.{i}.attention.self.{query,key,value} (rows of
// layers.{i}.attn.c_attn's weight and bias), attention.output.dense (attn.c_proj),
// attention.output.LayerNorm (ln_1), intermediate.dense (mlp.c_fc), output.dense (mlp.c_proj),
// output.LayerNorm (ln_2), and pooler.dense when `pooler`; loom's names start with loom_prefix.
// None transposed.
HfTensorMap hf_bert_tensor_map(const BertConfig& cfg, bool pooler, const std::string& hf_prefix,
                               const std::string& loom_prefix);
// BertForMaskedLM's: the encoder under "bert." without pooler, cls.predictions.transform.dense,
// cls.predictions.transform.LayerNorm, cls.predictions.bias (the tied decoder is not a tensor of
// its own).
HfTensorMap hf_bert_tensor_map(const BertForMaskedLM& model);
// BertForSequenceClassification's: the encoder under "bert." with its pooler, classifier.
HfTensorMap hf_bert_tensor_map(const BertForSequenceClassification& model);

// A new model on `device` in `dtype` with the folder's weights. load_hf_bert reads the encoder
// (names with or without "bert.", a pooler when the folder has one) and ignores any head.
ModuleHolder<Bert> load_hf_bert(const std::string& dir, Device device = kCPU, DType dtype = kF32);
ModuleHolder<BertForMaskedLM> load_hf_bert_for_masked_lm(const std::string& dir,
                                                         Device device = kCPU, DType dtype = kF32);
ModuleHolder<BertForSequenceClassification> load_hf_bert_for_sequence_classification(
    const std::string& dir, Device device = kCPU, DType dtype = kF32);

// Writes config.json and the weights as the transformers class's save_pretrained does (no tied
// decoder), in options.dtype or the parameters' own dtype.
void save_hf_bert(const Bert& model, const std::string& dir, const HfSaveOptions& options = {});
void save_hf_bert(const BertForMaskedLM& model, const std::string& dir,
                  const HfSaveOptions& options = {});
void save_hf_bert(const BertForSequenceClassification& model, const std::string& dir,
                  const HfSaveOptions& options = {});

}  // namespace loom::nn
