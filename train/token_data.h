// TokenData: the token loaders of a language-model run, sharded over the job's processes like
// ClassifierData (Note [Data-parallel training loop] in train/classifier_data.h). Training: the
// windows of T + 1 tokens of data/token_dataset.h (Note [Token windows]); a shuffled
// DistributedSampler (seed + epoch, drop_last) draws --batch-size / N of them per process and
// step, and the checkpoint saves its position. Validation: every validation window on exactly
// one rank (Note [Sharded evaluation] in train/evaluate.h). The tokens come from a UTF-8 text
// file (bytes are tokens: vocabulary 256; its last --val-fraction is validation; tokenized into
// shards in a temporary folder) or from a folder of .bin shards (train_*.bin, val_*.bin:
// data/token_shards.h). Leaves out: tokenizers other than bytes (shards made elsewhere with
// GPT-2's BPE load as they are).
#pragma once

#include <memory>
#include <string>

#include "data/dataloader.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "train/run_setup.h"

namespace loom::train {

struct TokenDataConfig {
  std::string text;       // a UTF-8 text file, tokenized by `tokenizer` below
  std::string shards;     // or a folder with train_*.bin and val_*.bin
  int64_t seq_len = 256;  // T: tokens per window
  int64_t vocab_size = 256;
  int64_t max_context = 0;    // the model's context (its position table); 0: seq_len
  double val_fraction = 0.1;  // of the text file
  int64_t val_windows = 0;    // evaluate on the first N validation windows only (0: all)
  std::shared_ptr<const data::Tokenizer> tokenizer = nullptr;  // of --text; null: bytes
};

struct TokenData {
  // Errors: neither or both of text and shards, files that do not read (data/token_shards.h), a
  // token outside the vocabulary, too few tokens for one window, no full training batch.
  TokenData(const TrainConfig& cfg, const RunSetup& run, const TokenDataConfig& t);

  std::shared_ptr<const data::TokenDataset> train_set, val_set;
  std::unique_ptr<data::DataLoader> train, val;
};

}  // namespace loom::train
