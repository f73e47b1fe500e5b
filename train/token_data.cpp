// The token loaders of a language-model run. See token_data.h.
#include "train/token_data.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/text_shards.h"
#include "train/sharded_loaders.h"

namespace loom::train {

namespace {
using Split = std::shared_ptr<const data::TokenDataset>;

// The training and validation splits: the shards in `t.shards`, or `t.text` tokenized (bytes, or
// t.tokenizer) into shards in a temporary folder, mapped, and the folder removed (the mappings
// stay valid).
std::pair<Split, Split> load_splits(const TokenDataConfig& t) {
  data::TokenDatasetOptions o{.vocab_size = t.vocab_size,
                              .seq_len = t.seq_len,
                              .max_context = t.max_context > 0 ? t.max_context : t.seq_len};
  if (!t.shards.empty())
    return {std::make_shared<const data::TokenDataset>(
                data::glob_token_files(t.shards + "/train_*.bin"), o),
            std::make_shared<const data::TokenDataset>(
                data::glob_token_files(t.shards + "/val_*.bin"), o)};
  const data::ByteTokenizer bytes;
  const data::Tokenizer& tok = t.tokenizer ? *t.tokenizer : bytes;
  LOOM_CHECK(t.vocab_size >= tok.vocab_size(), "--text: the tokenizer ", tok.name(), " has ",
             tok.vocab_size(), " ids, so the vocabulary must hold them, not --vocab-size ",
             t.vocab_size);
  char tmpl[] = "/tmp/loom_text_tokens_XXXXXX";
  LOOM_CHECK(::mkdtemp(tmpl) != nullptr, "--text: cannot make a temporary folder in /tmp");
  std::string dir = tmpl;
  struct Remove {
    std::string d;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } remove{dir};
  data::TextShards ts = data::text_to_shards(t.text, dir, t.val_fraction, tok);
  return {std::make_shared<const data::TokenDataset>(std::vector{ts.train_path}, o),
          std::make_shared<const data::TokenDataset>(std::vector{ts.val_path}, o)};
}
}  // namespace

TokenData::TokenData(const TrainConfig& cfg, const RunSetup& run, const TokenDataConfig& t) {
  LOOM_CHECK(t.text.empty() != t.shards.empty(),
             "give the training text as --text FILE or --shards DIR (exactly one of them)");
  std::tie(train_set, val_set) = load_splits(t);
  train = sharded_train_loader(train_set, cfg, run);
  int64_t n_val = t.val_windows > 0 ? std::min(t.val_windows, val_set->size()) : val_set->size();
  val = sharded_eval_loader(val_set, n_val, run.local_batch, 0, run);
  LOOM_CHECK(train->size() > 0, "no training step: ", train_set->size(),
             " training windows make no full batch of --batch-size ", cfg.batch_size);
}

}  // namespace loom::train
