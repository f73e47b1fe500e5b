// Masked-language-model batches (data/mlm.h): mask_tokens (Note [Dynamic masking]), the padded
// rows both collate_mlm and MlmDataset fill, and the batch's four tensors.
// Leaves out: the GPU (masking is a few Philox blocks per token, on the loader's workers).
#include "data/mlm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/transforms.h"
#include "data/wordpiece.h"

namespace loom::data {

namespace {

// p * 2^32 as a threshold for a 32-bit word (p in [0, 1]).
uint64_t threshold(double p) { return uint64_t(std::ldexp(p, 32)); }

void check_masking(const MlmMasking& m) {
  LOOM_CHECK(m.vocab_size >= 1, "mask_tokens: vocab_size ", m.vocab_size, " must be at least 1");
  LOOM_CHECK(m.mask_id >= 0 && m.mask_id < m.vocab_size, "mask_tokens: mask_id ", m.mask_id,
             " is outside the vocabulary [0, ", m.vocab_size, ")");
  LOOM_CHECK(m.probability >= 0 && m.probability <= 1 && m.mask_fraction >= 0 &&
                 m.random_fraction >= 0 && m.mask_fraction + m.random_fraction <= 1,
             "mask_tokens: probability ", m.probability, ", mask_fraction ", m.mask_fraction,
             " and random_fraction ", m.random_fraction,
             " must be in [0, 1], the two fractions summing to at most 1");
}

const BertInput& checked_example(std::span<const BertInput> examples, int64_t index,
                                 const char* what) {
  LOOM_CHECK(index >= 0 && index < int64_t(examples.size()), what, ": index ", index,
             " is out of range for ", examples.size(), " examples");
  const BertInput& e = examples[size_t(index)];
  LOOM_CHECK(e.token_types.size() == e.ids.size(), what, ": example ", index, " has ", e.ids.size(),
             " ids but ", e.token_types.size(), " token types");
  return e;
}

// Row `index` of a batch padded to t positions: each pointer is that row's start.
void fill_row(const BertInput& e, int64_t index, int64_t epoch, int64_t t, int32_t pad_id,
              const MlmMasking& masking, int64_t* ids, int64_t* types, int64_t* attention,
              int64_t* labels) {
  const int64_t n = int64_t(e.ids.size());
  for (int64_t k = 0; k < n; ++k) ids[k] = e.ids[size_t(k)], types[k] = e.token_types[size_t(k)];
  std::fill(attention, attention + n, 1);
  mask_tokens(masking, epoch, index, std::span<int64_t>(ids, size_t(n)),
              std::span<int64_t>(labels, size_t(n)));
  std::fill(ids + n, ids + t, int64_t(pad_id));
  std::fill(types + n, types + t, 0);
  std::fill(attention + n, attention + t, 0);
  std::fill(labels + n, labels + t, kIgnoreIndex);
}

}  // namespace

MlmMasking MlmMasking::for_tokenizer(const WordPieceTokenizer& tokenizer, uint64_t seed) {
  MlmMasking m;
  m.vocab_size = tokenizer.vocab_size();
  m.mask_id = tokenizer.mask_id();
  m.special_ids = tokenizer.special_ids();
  m.seed = seed;
  return m;
}

void mask_tokens(const MlmMasking& masking, int64_t epoch, int64_t index, std::span<int64_t> ids,
                 std::span<int64_t> labels) {
  check_masking(masking);
  LOOM_CHECK(ids.size() == labels.size(), "mask_tokens: ", ids.size(), " ids but ", labels.size(),
             " labels");
  const uint64_t choose = threshold(masking.probability);
  const uint64_t to_mask = threshold(masking.mask_fraction);
  const uint64_t to_random = threshold(masking.mask_fraction + masking.random_fraction);
  const auto& specials = masking.special_ids;
  const bool sorted = std::is_sorted(specials.begin(), specials.end());
  auto is_special = [&](int64_t id) {
    return sorted ? std::binary_search(specials.begin(), specials.end(), id)
                  : std::find(specials.begin(), specials.end(), id) != specials.end();
  };
  SampleRng rng(masking.seed, epoch, index);
  for (size_t t = 0; t < ids.size(); ++t) {
    const uint32_t w0 = rng.next_u32(), w1 = rng.next_u32(), w2 = rng.next_u32();
    rng.next_u32();  // the fourth word: position t keeps block t of the stream
    labels[t] = kIgnoreIndex;
    if (uint64_t(w0) >= choose || is_special(ids[t])) continue;
    labels[t] = ids[t];
    if (uint64_t(w1) < to_mask)
      ids[t] = masking.mask_id;
    else if (uint64_t(w1) < to_random)
      ids[t] = int64_t((uint64_t(w2) * uint64_t(masking.vocab_size)) >> 32);
  }
}

MlmBatch collate_mlm(std::span<const BertInput> examples, std::span<const int64_t> indices,
                     int64_t epoch, int32_t pad_id, const MlmMasking& masking, int64_t pad_to) {
  int64_t longest = 0;
  for (int64_t i : indices)
    longest = std::max(longest, int64_t(checked_example(examples, i, "collate_mlm").ids.size()));
  LOOM_CHECK(pad_to >= 0, "collate_mlm: pad_to ", pad_to, " is negative");
  if (pad_to > 0)
    for (int64_t i : indices)
      LOOM_CHECK(int64_t(examples[size_t(i)].ids.size()) <= pad_to, "collate_mlm: example ", i,
                 " has ", examples[size_t(i)].ids.size(), " ids, more than pad_to ", pad_to);
  const int64_t b = int64_t(indices.size()), t = pad_to > 0 ? pad_to : longest;
  MlmBatch out;
  for (Tensor* x : {&out.input_ids, &out.token_type_ids, &out.attention_mask, &out.labels})
    *x = empty({b, t}, {.dtype = kI64});
  for (int64_t r = 0; r < b; ++r) {
    const int64_t i = indices[size_t(r)];
    fill_row(examples[size_t(i)], i, epoch, t, pad_id, masking,
             out.input_ids.data<int64_t>() + r * t, out.token_type_ids.data<int64_t>() + r * t,
             out.attention_mask.data<int64_t>() + r * t, out.labels.data<int64_t>() + r * t);
  }
  return out;
}

MlmDataset::MlmDataset(std::vector<BertInput> examples, int64_t max_length, int32_t pad_id,
                       MlmMasking masking)
    : examples_(std::move(examples)),
      max_length_(max_length),
      pad_id_(pad_id),
      masking_(std::move(masking)) {
  LOOM_CHECK(max_length_ >= 1, "MlmDataset: max_length ", max_length_, " must be at least 1");
  check_masking(masking_);
  for (int64_t i = 0; i < size(); ++i)
    LOOM_CHECK(int64_t(checked_example(examples_, i, "MlmDataset").ids.size()) <= max_length_,
               "MlmDataset: example ", i, " has ", examples_[size_t(i)].ids.size(),
               " ids, more than max_length ", max_length_);
}

const BertInput& MlmDataset::example(int64_t index) const {
  return checked_example(examples_, index, "MlmDataset");
}

Example MlmDataset::get_for_epoch(int64_t index, int64_t epoch) const {
  const BertInput& e = example(index);
  const int64_t t = max_length_;
  Example out{empty({3, t}, {.dtype = kI64}), empty({t}, {.dtype = kI64})};
  int64_t* rows = out.data.data<int64_t>();
  fill_row(e, index, epoch, t, pad_id_, masking_, rows, rows + t, rows + 2 * t,
           out.target.data<int64_t>());
  return out;
}

int64_t MlmDataset::longest(std::span<const int64_t> indices) const {
  int64_t n = 0;
  for (int64_t i : indices) n = std::max(n, int64_t(example(i).ids.size()));
  return n;
}

MlmBatch mlm_batch(const Batch& batch, int64_t length) {
  LOOM_CHECK(batch.data.defined() && batch.data.dim() == 3 && batch.data.size(1) == 3 &&
                 batch.data.dtype() == kI64 && batch.target.defined() && batch.target.dim() == 2 &&
                 batch.target.size(1) == batch.data.size(2),
             "mlm_batch: a batch of an MlmDataset has data (B, 3, T) and target (B, T) int64; got ",
             describe(batch.data), " and ",
             batch.target.defined() ? describe(batch.target) : std::string("no target"));
  const int64_t t = batch.data.size(2);
  LOOM_CHECK(length >= 0 && length <= t, "mlm_batch: length ", length, " is outside [0, ", t, "]");
  const int64_t keep = length > 0 ? length : t;
  auto part = [&](const Tensor& x) { return x.slice(1, 0, keep).contiguous(); };
  return {part(batch.data.select(1, 0)), part(batch.data.select(1, 1)),
          part(batch.data.select(1, 2)), part(batch.target)};
}

}  // namespace loom::data
