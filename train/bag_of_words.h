// The bag-of-words baseline of a train_bert classification run: logistic regression over each
// example's term frequencies (the count of each vocabulary id among its real tokens, divided by
// their number), a Linear (vocabulary -> labels) trained with AdamW and cross-entropy for a few
// epochs on the same training split, scored on the same validation split as BERT. It sees which
// words occur and nothing of their order: what BERT's accuracy is measured against. Every rank
// trains the same one on the whole split (the same seed), so no rank waits for another.
// Leaves out: n-grams, TF-IDF weighting and sparse features (the (B, V) features of a batch are
// dense).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "data/dataset.h"

namespace loom::train {

// rows (B, 3, T) int64 (Note [BERT rows] in train/bert_model.h) -> (B, vocab_size) float32 term
// frequencies of the ids whose attention mask is 1. An id outside [0, vocab_size) is an error
// naming it.
Tensor term_frequencies(const Tensor& rows, int64_t vocab_size);

struct BagOfWordsOptions {
  int64_t vocab_size = 0;
  int64_t num_labels = 2;
  int64_t epochs = 5;
  int64_t batch_size = 64;
  double lr = 1e-2;  // AdamW's
  double weight_decay = 0.0;
  uint64_t seed = 0;  // the weights' initialisation and the order of the examples
  Device device = kCPU;
};

struct BagOfWordsResult {
  double train_accuracy = 0, val_accuracy = 0;
};

// Trains on train (rows (N, 3, T), labels (N)) and reports the accuracy on both splits.
BagOfWordsResult train_bag_of_words(const data::TensorDataset& train,
                                    const data::TensorDataset& val, const BagOfWordsOptions& o);

}  // namespace loom::train
