// The BERT of a train_bert run. See bert_model.h.
#include "train/bert_model.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/error.h"
#include "nn/hf_bert.h"
#include "train/progress.h"

namespace loom::train {

BertRows bert_rows(const Tensor& rows, bool trim) {
  LOOM_CHECK(rows.dim() == 3 && rows.size(1) == 3, "bert_rows: expected (B, 3, T) rows, got ",
             describe(rows));
  Tensor ids = rows.select(1, 0), types = rows.select(1, 1);
  Tensor lengths = nn::bert_lengths_from_mask(rows.select(1, 2));
  if (trim) {
    const int64_t longest = int64_t(max(lengths).item());
    ids = ids.slice(1, 0, longest), types = types.slice(1, 0, longest);
  }
  return {ids.contiguous(), types.contiguous(), lengths};
}

namespace {

nn::BertConfig preset_config(const BertSpec& s) {
  nn::BertConfig c;
  if (s.preset == "mini") {
    c.hidden = 128, c.n_layers = 4, c.n_heads = 4, c.intermediate = 512;
  } else if (s.preset == "tiny" || s.preset == "bert-base" || s.preset == "bert-large") {
    c = nn::BertConfig::preset(s.preset);
  } else {
    LOOM_FAIL("--model \"", s.preset,
              "\" is not a BERT preset (tiny, mini, bert-base, bert-large)");
  }
  c.vocab_size = s.vocab_size;
  c.max_position = std::max(c.max_position, s.seq_len);
  c.dropout = c.classifier_dropout = s.dropout;
  return c;
}

// The folder's config must hold the run's ids and windows.
void check_folder_fits(const nn::BertConfig& c, const BertSpec& s) {
  LOOM_CHECK(c.vocab_size >= s.vocab_size, "--init-from ", s.init_from, ": its vocabulary (",
             c.vocab_size, ") cannot hold the tokenizer's ", s.vocab_size, " ids");
  LOOM_CHECK(c.max_position >= s.seq_len, "--init-from ", s.init_from, ": its ", c.max_position,
             " positions are fewer than --seq-len ", s.seq_len);
}

// Runs `load`, naming --init-from in what it throws.
template <typename F>
auto from_folder(const BertSpec& s, F load) {
  try {
    return load();
  } catch (const std::exception& e) {
    LOOM_FAIL("--init-from ", s.init_from,
              " is not a Hugging Face BERT folder loom can read: ", e.what());
  }
}

// Training FLOPs per token: 6 per weight a token passes through (the embeddings are lookups),
// plus attention's two products over seq_len keys (12 L C T), plus the MLM head's vocabulary.
double flops_per_token(const nn::BertConfig& c, int64_t seq_len, bool mlm) {
  const double C = double(c.hidden), L = double(c.n_layers);
  const double block = 4 * C * C + 2 * C * double(c.intermediate);
  double f = 6 * L * block + 12 * L * C * double(seq_len);
  if (mlm) f += 6 * (C * C + C * double(c.vocab_size));
  return f;
}

// A BertForMaskedLM or BertForSequenceClassification over rows (Note [BERT rows]): forward ->
// its logits, (B, T', V) or (B, num_labels); loss(rows, labels) its mean cross-entropy, a masked
// LM's labels (B, T) (-100 where nothing is masked, data::kIgnoreIndex) cut to the T' kept, a
// classifier's (B) as they are. Registered as "mlm" or "classifier".
template <typename Model>
class OnRows final : public nn::Module {
 public:
  static constexpr bool kMlm = std::is_same_v<Model, nn::BertForMaskedLM>;

  OnRows(std::shared_ptr<Model> m, bool trim_rows)
      : nn::Module(kMlm ? "MaskedLMOnRows" : "ClassifierOnRows"), model(m), trim(trim_rows) {
    register_module(kMlm ? "mlm" : "classifier", m);
  }
  Tensor forward(const Tensor& rows) override {
    BertRows r = bert_rows(rows, trim);
    return model->forward(r.ids, r.token_types, r.lengths);
  }
  bool has_loss() const override { return true; }
  Tensor loss(const Tensor& rows, const Tensor& labels) override {
    BertRows r = bert_rows(rows, trim);
    return model->loss(r.ids, r.token_types, r.lengths,
                       kMlm ? labels.slice(1, 0, r.ids.size(1)) : labels);
  }

  std::shared_ptr<Model> model;
  bool trim;
};

// m over rows, with its title ("BERT 4x128, masked LM (1234567 parameters)"), FLOPs and writer.
template <typename Model>
BertTask task_of(std::shared_ptr<Model> m, const BertSpec& s, const std::string& what) {
  const nn::BertConfig& c = m->bert->config;
  int64_t params = 0;
  for (const Tensor& p : m->parameters()) params += p.numel();
  return {
      .net = std::make_shared<OnRows<Model>>(m, s.trim),
      .title = str("BERT ", c.n_layers, "x", c.hidden, ", ", what, " (", params, " parameters)"),
      .flops_per_token = flops_per_token(c, s.seq_len, OnRows<Model>::kMlm),
      .save_hf = [m](const std::string& dir) { nn::save_hf_bert(*m, dir); }};
}

BertTask masked_lm(const BertSpec& s) {
  std::shared_ptr<nn::BertForMaskedLM> m;
  if (s.init_from.empty()) {
    m = std::make_shared<nn::BertForMaskedLM>(preset_config(s));
  } else {
    m = from_folder(s, [&] { return nn::load_hf_bert_for_masked_lm(s.init_from); });
    check_folder_fits(m->bert->config, s);
  }
  return task_of(m, s, "masked LM");
}

// From a folder: its encoder (any head left out: an MLM folder has no pooler or classifier), a
// new pooler and classifier when it has none, as transformers' from_pretrained starts them.
BertTask classifier(const BertSpec& s) {
  std::shared_ptr<nn::BertForSequenceClassification> m;
  if (s.init_from.empty()) {
    m = std::make_shared<nn::BertForSequenceClassification>(preset_config(s), s.num_labels);
  } else {
    auto encoder = from_folder(s, [&] { return nn::load_hf_bert(s.init_from); });
    check_folder_fits(encoder->config, s);
    nn::BertConfig c = encoder->config;
    c.dropout = c.classifier_dropout = s.dropout;
    m = std::make_shared<nn::BertForSequenceClassification>(c, s.num_labels);
    m->bert->load_state_dict(encoder->state_dict(), /*strict=*/false);
  }
  return task_of(m, s, s.task + " classifier");
}

}  // namespace

BertTask make_bert_task(const BertSpec& spec) {
  return spec.task == "mlm" ? masked_lm(spec) : classifier(spec);
}

Evaluation evaluate_masked_lm(distributed::ParallelModel& parallel, data::DataLoader& loader,
                              const RunSetup& setup) {
  double start = steady_seconds();
  NoGradGuard no_grad;
  nn::Module& model = parallel.eval_module();
  model.eval();
  const Device dev = setup.device;
  Tensor sums = zeros({3}, {.dtype = kF64, .device = dev});  // loss, correct, masked positions
  for (auto& b : loader) {
    Tensor logits = model(b.data);  // (B, T', V)
    Tensor labels = flatten(b.target.slice(1, 0, logits.size(1)).contiguous());
    logits = flatten(logits, 0, -2);
    Tensor counted = ne(labels, full_like(labels, double(-100)));
    Tensor loss = cross_entropy(logits, labels, Reduction::Sum).to(kF64).reshape({1});
    Tensor right = (eq(argmax(logits, -1), labels).to(kF64) * counted.to(kF64)).sum().reshape({1});
    sums = sums + cat({loss, right, counted.to(kF64).sum().reshape({1})}, 0);
  }
  model.train();
  if (setup.pg->size() > 1) setup.pg->all_reduce(sums, distributed::ReduceOp::Sum)->wait();
  std::vector<double> h = sums.to(kCPU).to_vector<double>();
  const double n = std::max(h[2], 1.0);
  return {h[0] / n, h[1] / n, steady_seconds() - start};
}

}  // namespace loom::train
