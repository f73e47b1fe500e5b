// The datasets and loaders of a train_bert run. See bert_data.h.
#include "train/bert_data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "autograd/ops/ops.h"
#include "core/error.h"
#include "data/mlm.h"
#include "data/mlm_examples.h"
#include "train/sharded_loaders.h"

namespace loom::train {

namespace {

std::string read_text(const std::string& path) {
  LOOM_CHECK(!path.empty(), "give the text to train on as --text FILE");
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "--text ", path, " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The KJV's chapters when the text is laid out as scripts/gpt-corpus.sh writes it, else its
// blank-line separated paragraphs.
data::Documents documents_of(const std::string& text) {
  try {
    data::Documents docs = data::kjv_chapters(text);
    size_t verses = 0;
    for (const auto& d : docs) verses += d.size();
    if (verses > 0) return docs;
  } catch (const Error&) {
  }
  return data::documents_from_text(text);
}

// Examples as rows (N, 3, T) of Note [BERT rows]: ids, token types, attention mask, padded.
Tensor rows_of(const std::vector<data::BertInput>& examples, int64_t T, int32_t pad_id) {
  const int64_t N = int64_t(examples.size());
  std::vector<int64_t> v(size_t(N * 3 * T), 0);
  for (int64_t i = 0; i < N; ++i) {
    const data::BertInput& e = examples[size_t(i)];
    int64_t* row = v.data() + i * 3 * T;
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < int64_t(e.ids.size());
      row[t] = real ? e.ids[size_t(t)] : pad_id;
      row[T + t] = real ? e.token_types[size_t(t)] : 0;
      row[2 * T + t] = real ? 1 : 0;
    }
  }
  return from_vector(v, {N, 3, T});
}

// Epoch 0's masks of every example, fixed: the validation set.
std::shared_ptr<const data::Dataset> fixed_masks(const data::MlmDataset& set) {
  std::vector<Tensor> rows, labels;
  for (int64_t i = 0; i < set.size(); ++i) {
    data::Example e = set.get_for_epoch(i, 0);
    rows.push_back(e.data), labels.push_back(e.target);
  }
  return std::make_shared<const data::TensorDataset>(stack(rows, 0), stack(labels, 0));
}

int64_t tokens_of(const std::vector<data::BertInput>& examples) {
  int64_t n = 0;
  for (const auto& e : examples) n += int64_t(e.ids.size());
  return n;
}

void check_batches(const data::DataLoader& train, int64_t examples, const TrainConfig& cfg,
                   const RunSetup& run) {
  LOOM_CHECK(train.size() > 0, "no training step: ", examples,
             " training examples make no full batch of --batch-size ", cfg.batch_size,
             run.world > 1 ? str(" over ", run.world, " processes") : std::string(),
             "; lower --batch-size or give a longer --text");
}

}  // namespace

MlmData::MlmData(const TrainConfig& cfg, const RunSetup& run, const BertDataConfig& b) {
  const data::WordPieceTokenizer& tok = *b.tokenizer;
  data::Documents docs = documents_of(read_text(b.text));
  const size_t n_val = std::min(docs.size() - std::min<size_t>(docs.size(), 1),
                                size_t(std::ceil(double(docs.size()) * b.val_fraction)));
  data::Documents val_docs(docs.end() - std::ptrdiff_t(n_val), docs.end());
  docs.resize(docs.size() - n_val);
  const data::PackOptions pack{.max_length = b.seq_len};
  auto train_examples = data::pack_documents(tok, docs, tok.cls_id(), tok.sep_id(), pack);
  auto val_examples = data::pack_documents(tok, val_docs, tok.cls_id(), tok.sep_id(), pack);
  LOOM_CHECK(!train_examples.empty() && !val_examples.empty(), "--text ", b.text, " makes ",
             train_examples.size(), " training and ", val_examples.size(),
             " validation examples: it needs at least two documents (chapters or paragraphs)");
  train_tokens = tokens_of(train_examples);
  const data::MlmMasking masking = data::MlmMasking::for_tokenizer(tok, cfg.seed);
  train_set = std::make_shared<const data::MlmDataset>(std::move(train_examples), b.seq_len,
                                                       tok.pad_id(), masking);
  val_set = fixed_masks(data::MlmDataset(std::move(val_examples), b.seq_len, tok.pad_id(),
                                         data::MlmMasking::for_tokenizer(tok, cfg.seed + 1)));
  train = sharded_train_loader(train_set, cfg, run);
  const int64_t n =
      b.val_examples > 0 ? std::min(b.val_examples, val_set->size()) : val_set->size();
  val = sharded_eval_loader(val_set, n, run.local_batch, 0, run);
  check_batches(*train, train_set->size(), cfg, run);
}

std::vector<KjvVerse> kjv_verses(std::string_view text) {
  std::vector<KjvVerse> out;
  std::string book;  // the current heading's name: "1 Kings" of "1 Kings 3"
  int64_t index = -1, number = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start), t = trim(line);
    start = end + 1, ++number;
    if (t.empty()) continue;
    size_t digits = 0;
    while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
    if (line[0] != ' ' && line[0] != '\t') {  // "Genesis 1"
      const std::string name(trim(t.substr(
          0, t.find_last_of(' ') == std::string_view::npos ? t.size() : t.find_last_of(' '))));
      if (name != book) book = name, ++index;
      continue;
    }
    LOOM_CHECK(digits > 0 && digits < t.size() && t[digits] == ' ' && index >= 0,
               "kjv_verses: line ", number, " (\"", t.substr(0, 40),
               "\") is neither a book and chapter heading nor a numbered verse after one");
    out.push_back({index, std::string(trim(t.substr(digits)))});
  }
  return out;
}

TestamentData::TestamentData(const TrainConfig& cfg, const RunSetup& run, const BertDataConfig& b) {
  const data::WordPieceTokenizer& tok = *b.tokenizer;
  std::vector<KjvVerse> verses = kjv_verses(read_text(b.text));
  const int64_t books = verses.empty() ? 0 : verses.back().book + 1;
  LOOM_CHECK(books >= 40, "--text ", b.text, " has ", books,
             " books: the testament task needs the KJV's 66, Old (1-39) and New (40-66), laid "
             "out as scripts/gpt-corpus.sh writes them");
  const int64_t stride = std::max<int64_t>(2, std::llround(1.0 / b.val_fraction));
  std::vector<data::BertInput> split[2];
  std::vector<int64_t> labels[2];
  for (size_t i = 0; i < verses.size(); ++i) {
    const int s = int64_t(i) % stride == stride - 1;  // 1: validation
    split[s].push_back(tok.encode_single(verses[i].text, b.seq_len));
    labels[s].push_back(verses[i].book >= 39 ? 1 : 0);
  }
  // Validation in a fixed shuffled order: --eval-examples' first N come from every book.
  std::mt19937_64 rng(1234);
  for (size_t i = split[1].size(); i > 1; --i) {
    const size_t j = size_t(rng() % i);
    std::swap(split[1][i - 1], split[1][j]), std::swap(labels[1][i - 1], labels[1][j]);
  }
  int64_t longest = 0;
  for (const auto& part : split)
    for (const auto& e : part) longest = std::max(longest, int64_t(e.ids.size()));
  auto dataset = [&](int s) {
    const int64_t n = int64_t(labels[s].size());
    return std::make_shared<const data::TensorDataset>(rows_of(split[s], longest, tok.pad_id()),
                                                       from_vector(labels[s], {n}));
  };
  train_set = dataset(0), val_set = dataset(1);
  const double new_share =
      double(std::count(labels[1].begin(), labels[1].end(), 1)) / double(labels[1].size());
  majority_rate = std::max(new_share, 1 - new_share);
  train = sharded_train_loader(train_set, cfg, run);
  const int64_t n =
      b.val_examples > 0 ? std::min(b.val_examples, val_set->size()) : val_set->size();
  val = sharded_eval_loader(val_set, n, run.local_batch, 0, run);
  check_batches(*train, train_set->size(), cfg, run);
}

}  // namespace loom::train
