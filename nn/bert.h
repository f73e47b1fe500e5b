// BERT (Devlin et al., 2019) as Hugging Face's BertModel, BertForMaskedLM and
// BertForSequenceClassification compute it: embeddings LN(word + position + token type) then
// dropout; n post-norm transformer blocks (nn/transformer.h, Note [Post-norm]: x = LN(x +
// attn(x)); x = LN(x + mlp(x)), exact-erf GELU, biases everywhere, LayerNorm eps 1e-12) whose
// attention skips the padding of right-padded rows (key lengths); the pooler tanh(Linear(h[CLS]));
// the MLM head (Linear, GELU, LayerNorm, then the word embeddings' matrix plus a bias of its own)
// and the classification head (dropout, Linear on the pooled output). Parameter names:
// word_embeddings.weight, position_embeddings.weight, token_type_embeddings.weight,
// embeddings_norm.{weight,bias}, layers.{i}.attn.c_attn (query, key, value packed),
// layers.{i}.attn.c_proj, layers.{i}.ln_1 (after attention), layers.{i}.mlp.c_fc / c_proj,
// layers.{i}.ln_2, pooler; the heads' models prefix them with "bert." (the Hugging Face names are
// nn/hf_bert.h's). Leaves out: tokenization and MLM masking (data/), left padding and arbitrary
// attention masks, relative position embeddings, BertForPreTraining's next-sentence head.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/layers.h"
#include "nn/transformer.h"

namespace loom::nn {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden = 768;             // C (hidden_size)
  int64_t n_layers = 12;            // num_hidden_layers
  int64_t n_heads = 12;             // num_attention_heads; D = hidden / n_heads
  int64_t intermediate = 3072;      // the MLP's width (intermediate_size)
  int64_t max_position = 512;       // max_position_embeddings
  int64_t type_vocab_size = 2;      // token types (segments A and B)
  double norm_eps = 1e-12;          // layer_norm_eps
  double dropout = 0.1;             // hidden_dropout_prob = attention_probs_dropout_prob
  double classifier_dropout = 0.1;  // before the classification head (transformers: the
                                    // hidden dropout unless classifier_dropout is set)

  // "bert-base" (109,482,240 parameters with the pooler, as bert-base-uncased), "bert-large"
  // (335,141,888), "tiny" (2 layers, hidden 32, 4 heads, intermediate 64, vocab 100, 64
  // positions: the Hugging Face fixture's sizes) for tests. An unknown name is an error listing
  // them.
  static BertConfig preset(const std::string& name);
  // Sizes positive, n_heads dividing hidden, eps positive, dropouts in [0, 1); errors name the
  // field and its value.
  void check() const;
  // The blocks': post-norm, not causal, LayerNorm with eps norm_eps, exact-erf GELU MLP of
  // width intermediate, biases, dropout.
  TransformerConfig block_config() const;
  // Every parameter's name and shape as Bert(config, pooler) registers them, computed without
  // allocating (the presets' counts are tested from it).
  std::vector<std::pair<std::string, Shape>> parameter_shapes(bool pooler = true) const;
  int64_t num_parameters(bool pooler = true) const;  // the sum of parameter_shapes()
};

// The lengths of a right-padded batch from transformers' attention_mask (B, T) of ones then
// zeros (any integer or bool dtype) -> (B) int64 on its device: the number of ones per row. On the
// CPU an error names the row whose mask is not ones then zeros or has no one.
Tensor bert_lengths_from_mask(const Tensor& attention_mask);

// BertModel: embeddings, the encoder, the pooler (unless constructed without: BertForMaskedLM's).
class Bert : public Module {
 public:
  explicit Bert(BertConfig cfg, bool pooler = true);
  // input_ids: (B, T) int64 token ids, no padding, token type 0 -> hidden states (B, T, C).
  Tensor forward(const Tensor& input_ids) override;
  // input_ids (B, T) int64; token_type_ids (B, T) int64 or undefined (zeros); lengths (B) int32/
  // int64, each row's number of real tokens, or undefined (none padded) -> hidden states
  // (B, T, C). The rows' padded positions get values too; only lengths[b] of row b mean anything.
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& lengths);
  // tanh(pooler(hidden[:, 0])): (B, T, C) -> (B, C). An error when built without a pooler.
  Tensor pool(const Tensor& hidden);

  // Every Linear and embedding ~ N(0, 0.02) (transformers' initializer_range), biases 0,
  // LayerNorms 1 and 0.
  void init_weights();
  int64_t num_parameters() const;

  BertConfig config;
  ModuleHolder<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  ModuleHolder<LayerNorm> embeddings_norm;
  ModuleHolder<Dropout> embeddings_dropout;
  ModuleHolder<TransformerStack> layers;  // post-norm blocks: layers.0, layers.1, ...
  ModuleHolder<Linear> pooler;            // null without a pooler

 private:
  Tensor embed(const Tensor& input_ids, const Tensor& token_type_ids);  // -> (B, T, C)
};

// What the heads below share: a Bert (bert.*) under a task head, whose forward and loss take
// token types and lengths as Bert::forward; forward(input_ids) and loss(input_ids, labels), the
// model's own loss for a training step (train::StepRunner, bench_train's bert-base workload), are
// those with token types 0 and no padding.
class BertWithHead : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids,
                         const Tensor& lengths) = 0;
  virtual Tensor loss(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& lengths,
                      const Tensor& labels) = 0;
  Tensor forward(const Tensor& input_ids) override {
    return forward(input_ids, Tensor(), Tensor());
  }
  bool has_loss() const override { return true; }
  Tensor loss(const Tensor& input_ids, const Tensor& labels) override {
    return loss(input_ids, Tensor(), Tensor(), labels);
  }

  ModuleHolder<Bert> bert;
};

// BertForMaskedLM: a Bert without pooler and the MLM head; the decoder matrix IS
// bert.word_embeddings.weight (Note [Tied embedding] in nn/gpt.h), its bias mlm_bias.
class BertForMaskedLM : public BertWithHead {
 public:
  using BertWithHead::forward, BertWithHead::loss;
  explicit BertForMaskedLM(BertConfig cfg);
  // input_ids (B, T), token types and lengths (as Bert::forward) -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids,
                 const Tensor& lengths) override;
  // Mean cross-entropy of the logits against labels (B, T) int64, entries -100 ignored
  // (transformers' convention: only the masked positions carry labels).
  Tensor loss(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& lengths,
              const Tensor& labels) override;

  ModuleHolder<Linear> transform;  // C -> C, then GELU and transform_norm
  ModuleHolder<GELU> transform_act;
  ModuleHolder<LayerNorm> transform_norm;
  Tensor mlm_bias;  // (vocab_size), the decoder's bias
};

// BertForSequenceClassification: a Bert with its pooler, dropout and a Linear C -> num_labels.
class BertForSequenceClassification : public BertWithHead {
 public:
  using BertWithHead::forward, BertWithHead::loss;
  BertForSequenceClassification(BertConfig cfg, int64_t num_labels);
  // input_ids (B, T), token types and lengths -> logits (B, num_labels).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids,
                 const Tensor& lengths) override;
  // Mean cross-entropy of the logits against labels (B) int64 (single-label classification).
  Tensor loss(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& lengths,
              const Tensor& labels) override;

  int64_t num_labels;
  ModuleHolder<Dropout> dropout;
  ModuleHolder<Linear> classifier;
};

}  // namespace loom::nn
