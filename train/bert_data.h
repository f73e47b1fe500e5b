// BertData: the data of a train_bert run, sharded over the job's processes as TokenData and
// ClassifierData are (Note [Data-parallel training loop] in train/classifier_data.h), each
// example one (3, T) row block of Note [BERT rows] in train/bert_model.h.
//   MlmData (--task mlm): the text's documents (the KJV's chapters, or blank-line separated
//     paragraphs of any other text) packed into examples of at most --seq-len tokens
//     (data/mlm_examples.h); the last --val-fraction of the documents is validation. Training
//     examples are masked anew each epoch (data/mlm.h, Note [Dynamic masking]); validation ones
//     once, with epoch 0's masks, so every evaluation scores the same positions.
//   TestamentData (--task testament): each KJV verse labelled 0 (Old Testament, the first 39
//     books) or 1 (New Testament), one [CLS] verse [SEP] example each, every k-th verse
//     (k = 1 / --val-fraction) held out for validation, in a fixed shuffled order.
// Leaves out: other labelled corpora and tasks, and next-sentence prediction.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/wordpiece.h"
#include "train/run_setup.h"

namespace loom::train {

struct BertDataConfig {
  std::string text;  // --text: a UTF-8 file
  std::shared_ptr<const data::WordPieceTokenizer> tokenizer = nullptr;
  int64_t seq_len = 128;      // an example's tokens, [CLS] and [SEP] included
  double val_fraction = 0.1;  // of the documents (mlm) or the verses (testament)
  int64_t val_examples = 0;   // evaluate on the first N validation examples (0: all)
};

struct MlmData {
  // Errors name the flag: a --text that does not read or has no text, no full training batch.
  MlmData(const TrainConfig& cfg, const RunSetup& run, const BertDataConfig& b);

  std::shared_ptr<const data::Dataset> train_set, val_set;
  std::unique_ptr<data::DataLoader> train, val;
  int64_t train_tokens = 0;  // the training examples' tokens, [CLS] and [SEP] included
};

// One verse of the KJV text (scripts/gpt-corpus.sh's layout: "Genesis 1" headings, indented
// numbered verses) and its book: 0 for the first book named in the headings, 1 for the next...
struct KjvVerse {
  int64_t book = 0;
  std::string text;
};
// An error names the line number of a verse before any heading or a line that is neither.
std::vector<KjvVerse> kjv_verses(std::string_view text);

struct TestamentData {
  // Errors name the flag: a --text that does not read, fewer than 40 books (no New Testament),
  // no full training batch.
  TestamentData(const TrainConfig& cfg, const RunSetup& run, const BertDataConfig& b);

  static constexpr int64_t kNumLabels = 2;  // Old, New
  // Rows (N, 3, T) and labels (N): the whole splits, for the bag-of-words baseline.
  std::shared_ptr<const data::TensorDataset> train_set, val_set;
  std::unique_ptr<data::DataLoader> train, val;
  double majority_rate = 0;  // the validation accuracy of always answering the commonest label
};

}  // namespace loom::train
