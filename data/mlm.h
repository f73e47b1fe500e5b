// Masked-language-model data for BERT: dynamic masking as transformers'
// DataCollatorForLanguageModeling does it (15% of the tokens chosen, of those 80% [MASK], 10% a
// random id, 10% kept; labels the original ids there and -100 elsewhere), drawn anew each epoch
// from (seed, epoch, example index); padded batches of input ids, token types, attention mask and
// labels, through the DataLoader (MlmDataset) or by hand (collate_mlm). Leaves out: building the
// examples from text (data/mlm_examples.h), next-sentence prediction, whole-word masking.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "data/bert_inputs.h"
#include "data/dataloader.h"
#include "data/dataset.h"

namespace loom::data {

class WordPieceTokenizer;

// The label of a position the loss skips: cross_entropy's and nll_loss's default ignore_index
// (autograd/ops/softmax_loss.h), PyTorch's and transformers' -100.
constexpr int64_t kIgnoreIndex = -100;

struct MlmMasking {
  int64_t vocab_size = 0;                 // random replacements are uniform over [0, vocab_size)
  int32_t mask_id = -1;                   // [MASK]
  std::vector<int32_t> special_ids = {};  // never chosen: [CLS], [SEP], [PAD], [UNK], [MASK]
  double probability = 0.15;              // each other token chosen with it, independently
  double mask_fraction = 0.8;             // of the chosen: replaced by [MASK]
  double random_fraction = 0.1;           // of the chosen: replaced by a random id; the rest stay
  uint64_t seed = 0;

  // bert-base's: the tokenizer's vocabulary size, [MASK] and special_ids() (all the special
  // tokens, [UNK] included, as transformers' get_special_tokens_mask marks them).
  static MlmMasking for_tokenizer(const WordPieceTokenizer& tokenizer, uint64_t seed = 0);
};

// Note [Dynamic masking]
// mask_tokens draws example `index`'s masks for epoch `epoch` from SampleRng(seed, epoch, index)
// (data/transforms.h), four 32-bit words per position, position t taking words 4t..4t+3 whatever
// the other positions are: w0 < probability * 2^32 chooses the position (never a special id's);
// then w1 < mask_fraction * 2^32 puts [MASK], else w1 < (mask_fraction + random_fraction) * 2^32
// puts the id floor(w2 * vocab_size / 2^32), else the id stays. So the masks of an example
// depend on (seed, epoch, index) alone: not on the batch it lands in, the number of loader
// workers, the rank that reads it, or the padding; a new epoch draws new ones. transformers draws
// the same distribution from torch's global generator (Bernoulli(0.15) per position, then
// Bernoulli(0.8), then Bernoulli(0.5) of the rest, a random id over len(tokenizer)): the
// fractions match, the draws do not.
//
// ids (the example's, unpadded): chosen positions replaced in place; labels (same length): the
// original id at chosen positions, kIgnoreIndex elsewhere. Errors name the values: ids and labels
// of different lengths, vocab_size < 1, a mask_id outside [0, vocab_size), fractions outside [0, 1]
// or summing past 1.
void mask_tokens(const MlmMasking& masking, int64_t epoch, int64_t index, std::span<int64_t> ids,
                 std::span<int64_t> labels);

// One batch, each (B, T) int64 on one device: input_ids (masked, [PAD] past each row's length),
// token_type_ids (0 past the length), attention_mask (1 on the row's tokens, 0 on padding),
// labels (Note [Dynamic masking]; kIgnoreIndex on padding).
struct MlmBatch {
  Tensor input_ids, token_type_ids, attention_mask, labels;
};

// The examples `indices` of epoch `epoch`, masked and padded on the CPU: to the longest of them
// (pad_to 0) or to pad_to (an error naming the example longer than it). Errors name an index
// outside the examples and an example whose token types do not match its ids.
MlmBatch collate_mlm(std::span<const BertInput> examples, std::span<const int64_t> indices,
                     int64_t epoch, int32_t pad_id, const MlmMasking& masking, int64_t pad_to = 0);

// BERT examples as a Dataset for the DataLoader, each padded to max_length and masked per epoch
// (the loader's epoch reaches get_for_epoch): example i's data is (3, max_length) int64, the rows
// input_ids, token_type_ids, attention_mask; its target (max_length) int64 the labels. Shuffling,
// sharding over ranks (DistributedSampler) and workers leave the masks as Note [Dynamic masking]
// says. Checked at construction: every example at most max_length ids (the error names it).
class MlmDataset final : public Dataset {
 public:
  MlmDataset(std::vector<BertInput> examples, int64_t max_length, int32_t pad_id,
             MlmMasking masking);

  int64_t size() const override { return int64_t(examples_.size()); }
  Example get(int64_t index) const override { return get_for_epoch(index, 0); }
  Example get_for_epoch(int64_t index, int64_t epoch) const override;

  const BertInput& example(int64_t index) const;
  int64_t max_length() const { return max_length_; }
  const MlmMasking& masking() const { return masking_; }
  // The longest of the examples `indices` (for mlm_batch's length), read on the host.
  int64_t longest(std::span<const int64_t> indices) const;

 private:
  std::vector<BertInput> examples_;
  int64_t max_length_;
  int32_t pad_id_;
  MlmMasking masking_;
};

// A DataLoader batch of an MlmDataset as its four (B, T) tensors, contiguous, on the batch's
// device; length > 0 keeps the first `length` positions (MlmDataset::longest(batch.indices): no
// padding beyond the longest row), 0 all max_length.
MlmBatch mlm_batch(const Batch& batch, int64_t length = 0);

}  // namespace loom::data
