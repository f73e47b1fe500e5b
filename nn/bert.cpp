// BERT (nn/bert.h): its presets and checks, its parameter shapes counted without allocating, the
// encoder as the plain composition of the embeddings, the post-norm transformer stack
// (nn/transformer.h) and the pooler, and the MLM and classification heads.
// Leaves out: Hugging Face folders (nn/hf_bert.cpp).
#include "nn/bert.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/init.h"

namespace loom::nn {

// ---------------------------------------------------------------- config

BertConfig BertConfig::preset(const std::string& name) {
  BertConfig c;  // the defaults are bert-base's
  if (name == "bert-base") {
  } else if (name == "bert-large") {
    c.hidden = 1024, c.n_layers = 24, c.n_heads = 16, c.intermediate = 4096;
  } else if (name == "tiny") {  // tests/nn/golden/hf/bert's sizes
    c.vocab_size = 100, c.hidden = 32, c.n_layers = 2, c.n_heads = 4, c.intermediate = 64;
    c.max_position = 64;
  } else {
    LOOM_FAIL("BertConfig::preset: unknown name \"", name, "\" (bert-base, bert-large or tiny)");
  }
  return c;
}

void BertConfig::check() const {
  LOOM_CHECK(vocab_size > 0 && hidden > 0 && n_layers > 0 && n_heads > 0 && intermediate > 0 &&
                 max_position > 0 && type_vocab_size > 0,
             "BertConfig: every size must be positive (vocab_size ", vocab_size, ", hidden ",
             hidden, ", n_layers ", n_layers, ", n_heads ", n_heads, ", intermediate ",
             intermediate, ", max_position ", max_position, ", type_vocab_size ", type_vocab_size,
             ")");
  LOOM_CHECK(hidden % n_heads == 0, "BertConfig: hidden ", hidden, " is not divisible by n_heads ",
             n_heads);
  LOOM_CHECK(norm_eps > 0.0, "BertConfig: norm_eps ", norm_eps, " must be positive");
  LOOM_CHECK(dropout >= 0.0 && dropout < 1.0, "BertConfig: dropout ", dropout, " is not in [0, 1)");
  LOOM_CHECK(classifier_dropout >= 0.0 && classifier_dropout < 1.0,
             "BertConfig: classifier_dropout ", classifier_dropout, " is not in [0, 1)");
}

// Where BERT's block differs from GPT-2's (TransformerConfig's default, LayerNorm and GELU MLP
// with biases): post-norm, not causal, exact-erf GELU of width intermediate.
TransformerConfig BertConfig::block_config() const {
  return TransformerConfig{.n_embd = hidden,
                           .n_head = n_heads,
                           .causal = false,
                           .norm_first = false,
                           .dropout = dropout,
                           .norm_eps = norm_eps,
                           .gelu_approximate = "none",
                           .mlp_hidden = intermediate};
}

// The shapes the constructor registers, in its order (tests/nn/test_bert.cpp checks that the two
// agree).
std::vector<std::pair<std::string, Shape>> BertConfig::parameter_shapes(bool pooler) const {
  const int64_t C = hidden, F = intermediate;
  std::vector<std::pair<std::string, Shape>> out{
      {"word_embeddings.weight", {vocab_size, C}},
      {"position_embeddings.weight", {max_position, C}},
      {"token_type_embeddings.weight", {type_vocab_size, C}},
      {"embeddings_norm.weight", {C}},
      {"embeddings_norm.bias", {C}}};
  const std::vector<std::pair<std::string, Shape>> block{{"ln_1.weight", {C}},
                                                         {"ln_1.bias", {C}},
                                                         {"attn.c_attn.weight", {3 * C, C}},
                                                         {"attn.c_attn.bias", {3 * C}},
                                                         {"attn.c_proj.weight", {C, C}},
                                                         {"attn.c_proj.bias", {C}},
                                                         {"ln_2.weight", {C}},
                                                         {"ln_2.bias", {C}},
                                                         {"mlp.c_fc.weight", {F, C}},
                                                         {"mlp.c_fc.bias", {F}},
                                                         {"mlp.c_proj.weight", {C, F}},
                                                         {"mlp.c_proj.bias", {C}}};
  for (int64_t i = 0; i < n_layers; ++i)
    for (const auto& [name, shape] : block)
      out.push_back({"layers." + std::to_string(i) + "." + name, shape});
  if (pooler) {
    out.push_back({"pooler.weight", {C, C}});
    out.push_back({"pooler.bias", {C}});
  }
  return out;
}

int64_t BertConfig::num_parameters(bool pooler) const {
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes(pooler)) n += loom::numel(shape);
  return n;
}

Tensor bert_lengths_from_mask(const Tensor& mask) {
  LOOM_CHECK(mask.defined() && mask.dim() == 2 && !mask.is_floating_point(),
             "bert_lengths_from_mask: attention_mask must be (B, T) of integers or bools, got ",
             mask.defined() ? describe(mask) : std::string("an undefined tensor"));
  autograd::NoGradGuard no_grad;
  const Tensor m = to(mask, kI64);
  const Tensor lengths = sum(m, {1});  // (B)
  if (mask.device() != kCPU) return lengths;
  const auto v = m.contiguous().to_vector<int64_t>();
  const auto len = lengths.to_vector<int64_t>();
  const int64_t T = mask.size(1);
  for (int64_t b = 0; b < mask.size(0); ++b) {
    const int64_t n = len[size_t(b)];
    bool right_padded = n > 0;
    for (int64_t t = 0; t < T; ++t) right_padded &= v[size_t(b * T + t)] == (t < n ? 1 : 0);
    LOOM_CHECK(
        right_padded, "bert_lengths_from_mask: row ", b, " of attention_mask ", describe(mask),
        " is not ones then zeros with at least one one (loom's BERT takes right-padded rows)");
  }
  return lengths;
}

// ---------------------------------------------------------------- Bert

// Children made one statement at a time, in the order they are named (each init draws from the
// default generator).
Bert::Bert(BertConfig cfg, bool with_pooler) : Module("Bert"), config(std::move(cfg)) {
  config.check();
  const int64_t C = config.hidden;
  word_embeddings = register_module("word_embeddings", make<Embedding>(config.vocab_size, C));
  position_embeddings =
      register_module("position_embeddings", make<Embedding>(config.max_position, C));
  token_type_embeddings =
      register_module("token_type_embeddings", make<Embedding>(config.type_vocab_size, C));
  embeddings_norm = register_module("embeddings_norm",
                                    make<LayerNorm>(C, LayerNormOptions{.eps = config.norm_eps}));
  embeddings_dropout = register_module("embeddings_dropout", make<Dropout>(config.dropout));
  layers =
      register_module("layers", make<TransformerStack>(config.block_config(), config.n_layers));
  if (with_pooler) pooler = register_module("pooler", make<Linear>(C, C));
  init_weights();
}

void Bert::init_weights() {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, p] : named_parameters()) {
    const bool norm =
        name.find("norm.") != std::string::npos || name.find("ln_") != std::string::npos;
    if (norm && name.ends_with(".weight"))
      init::ones_(p);
    else if (name.ends_with(".bias"))
      init::zeros_(p);
    else
      init::normal_(p, 0.0, 0.02);
  }
}

int64_t Bert::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

// LN(word + position + token type), then dropout: (B, T) -> (B, T, C).
Tensor Bert::embed(const Tensor& ids, const Tensor& types) {
  LOOM_CHECK(ids.dim() == 2 && ids.dtype() == kI64, "Bert: input_ids ", describe(ids),
             " should be (B, T) int64 token ids");
  LOOM_CHECK(ids.size(1) <= config.max_position, "Bert: ", ids.size(1),
             " positions exceed max_position ", config.max_position);
  LOOM_CHECK(!types.defined() || (types.shape() == ids.shape() && types.dtype() == kI64),
             "Bert: token_type_ids ", types.defined() ? describe(types) : std::string(),
             " should be int64 of input_ids' shape ", ids.shape());
  const int64_t T = ids.size(1);
  Tensor positions = arange(0.0, double(T), 1.0, {.dtype = kI64, .device = ids.device()});
  Tensor type_ids =
      types.defined() ? types : zeros(ids.shape(), {.dtype = kI64, .device = ids.device()});
  Tensor x =
      word_embeddings(ids) + position_embeddings(positions) + token_type_embeddings(type_ids);
  return embeddings_dropout(embeddings_norm(x));
}

Tensor Bert::forward(const Tensor& ids) { return forward(ids, Tensor(), Tensor()); }

Tensor Bert::forward(const Tensor& ids, const Tensor& types, const Tensor& lengths) {
  return layers->forward(embed(ids, types), lengths);  // post-norm: no final norm
}

Tensor Bert::pool(const Tensor& hidden) {
  LOOM_CHECK(pooler, "Bert::pool: this Bert was built without a pooler (BertForMaskedLM's)");
  LOOM_CHECK(hidden.dim() == 3 && hidden.size(2) == config.hidden, "Bert::pool: hidden ",
             describe(hidden), " should be (B, T, ", config.hidden, ")");
  return tanh(pooler(select(hidden, 1, 0)));  // the [CLS] position: (B, C) -> (B, C)
}

// ---------------------------------------------------------------- heads

BertForMaskedLM::BertForMaskedLM(BertConfig cfg) : BertWithHead("BertForMaskedLM") {
  bert = register_module("bert", make<Bert>(std::move(cfg), /*pooler=*/false));
  const BertConfig& c = bert->config;
  transform = register_module("transform", make<Linear>(c.hidden, c.hidden));
  transform_act = register_module("transform_act", make<GELU>("none"));
  transform_norm = register_module("transform_norm",
                                   make<LayerNorm>(c.hidden, LayerNormOptions{.eps = c.norm_eps}));
  mlm_bias = zeros({c.vocab_size});
  register_parameter("mlm_bias", mlm_bias);
  autograd::NoGradGuard no_grad;
  init::normal_(transform->weight, 0.0, 0.02);
  init::zeros_(transform->bias);
}

// (B, T) -> hidden (B, T, C) -> transform (B, T, C) -> logits (B, T, V), the decoder tied.
Tensor BertForMaskedLM::forward(const Tensor& ids, const Tensor& types, const Tensor& lengths) {
  Tensor h = transform_norm(transform_act(transform(bert->forward(ids, types, lengths))));
  return linear(h, bert->word_embeddings->weight, mlm_bias);
}

Tensor BertForMaskedLM::loss(const Tensor& ids, const Tensor& types, const Tensor& lengths,
                             const Tensor& labels) {
  LOOM_CHECK(labels.shape() == ids.shape() && labels.dtype() == kI64,
             "BertForMaskedLM::loss: labels ", describe(labels),
             " should be int64 of input_ids' shape ", ids.shape());
  Tensor logits = forward(ids, types, lengths);  // (B, T, V)
  return cross_entropy(reshape(logits, {-1, logits.size(2)}), reshape(labels, {-1}),
                       Reduction::Mean, 0.0, -100);
}

BertForSequenceClassification::BertForSequenceClassification(BertConfig cfg, int64_t labels)
    : BertWithHead("BertForSequenceClassification"), num_labels(labels) {
  LOOM_CHECK(num_labels > 0, "BertForSequenceClassification: num_labels ", num_labels,
             " must be positive");
  bert = register_module("bert", make<Bert>(std::move(cfg), /*pooler=*/true));
  dropout = register_module("dropout", make<Dropout>(bert->config.classifier_dropout));
  classifier = register_module("classifier", make<Linear>(bert->config.hidden, num_labels));
  autograd::NoGradGuard no_grad;
  init::normal_(classifier->weight, 0.0, 0.02);
  init::zeros_(classifier->bias);
}

// (B, T) -> pooled (B, C) -> logits (B, K).
Tensor BertForSequenceClassification::forward(const Tensor& ids, const Tensor& types,
                                              const Tensor& lengths) {
  return classifier(dropout(bert->pool(bert->forward(ids, types, lengths))));
}

Tensor BertForSequenceClassification::loss(const Tensor& ids, const Tensor& types,
                                           const Tensor& lengths, const Tensor& labels) {
  LOOM_CHECK(labels.dim() == 1 && labels.size(0) == ids.size(0) && labels.dtype() == kI64,
             "BertForSequenceClassification::loss: labels ", describe(labels), " should be (",
             ids.size(0), ") int64");
  return cross_entropy(forward(ids, types, lengths), labels);
}

}  // namespace loom::nn
