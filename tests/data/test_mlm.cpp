// data/mlm: the masking statistics over many draws (15% chosen, 80/10/10, random ids uniform),
// specials and padding never chosen, labels -100 elsewhere, the same seed and epoch giving the same
// masks and another epoch others (Note [Dynamic masking]); padding, token types and the attention
// mask of a batch; MlmDataset through the DataLoader, alike for any number of workers or ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataloader.h"
#include "data/mlm.h"
#include "data/sampler.h"

using namespace loom;
using namespace loom::data;

namespace {

constexpr int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4;

MlmMasking masking(uint64_t seed = 7, int64_t vocab = 1000) {
  MlmMasking m;
  m.vocab_size = vocab, m.mask_id = kMask, m.special_ids = {kPad, kUnk, kCls, kSep, kMask};
  m.seed = seed;
  return m;
}

// [CLS] ... [SEP] of `n` ordinary ids (and an [UNK] every 50), a pair when `pair`.
BertInput example(size_t n, uint32_t seed, bool pair = false) {
  std::mt19937 gen(seed);
  std::vector<int32_t> a, b;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = i % 50 == 49 ? kUnk : int32_t(5 + gen() % 995);
    (pair && i >= n / 2 ? b : a).push_back(id);
  }
  return pair ? bert_input(a, b, kCls, kSep) : bert_input(a, kCls, kSep);
}

std::vector<int64_t> as_i64(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

std::vector<int64_t> row(const Tensor& t, int64_t r) { return t.select(0, r).to_vector<int64_t>(); }

}  // namespace

TEST(Mlm, FifteenPercentChosenThenEightyTenTen) {
  const MlmMasking m = masking();
  int64_t eligible = 0, chosen = 0, masked = 0, random = 0, kept = 0;
  double random_sum = 0;
  int64_t random_min = 1 << 30, random_max = -1;
  for (int64_t index = 0; index < 300; ++index) {
    const BertInput e = example(500, uint32_t(index));
    std::vector<int64_t> ids = as_i64(e.ids), labels(ids.size());
    mask_tokens(m, /*epoch=*/3, index, ids, labels);
    for (size_t t = 0; t < ids.size(); ++t) {
      const int64_t original = e.ids[t];
      const bool special = original < 5;
      eligible += !special;
      if (labels[t] == kIgnoreIndex) {  // not chosen: untouched
        ASSERT_EQ(ids[t], original) << "index " << index << " position " << t;
        continue;
      }
      ASSERT_FALSE(special) << "a special id was chosen at index " << index << " position " << t;
      ASSERT_EQ(labels[t], original);
      ++chosen;
      if (ids[t] == kMask) {
        ++masked;
      } else if (ids[t] == original) {
        ++kept;
      } else {
        ++random, random_sum += double(ids[t]);
        random_min = std::min(random_min, ids[t]), random_max = std::max(random_max, ids[t]);
      }
    }
  }
  // Within 4 standard deviations of the binomial counts (a random id equal to [MASK] or to the
  // original, 1 in 1000 of the 10%, is far inside that).
  auto near = [](int64_t count, int64_t n, double p) {
    return std::abs(double(count) - p * double(n)) < 4 * std::sqrt(double(n) * p * (1 - p));
  };
  EXPECT_GT(eligible, 140000);
  EXPECT_TRUE(near(chosen, eligible, 0.15)) << chosen << " of " << eligible;
  EXPECT_TRUE(near(masked, chosen, 0.8)) << masked << " of " << chosen;
  EXPECT_TRUE(near(random, chosen, 0.1)) << random << " of " << chosen;
  EXPECT_TRUE(near(kept, chosen, 0.1)) << kept << " of " << chosen;
  // Random ids uniform over the whole vocabulary (specials included, as transformers draws them).
  const double mean = random_sum / double(random), sd = 1000 / std::sqrt(12.0);
  EXPECT_LT(std::abs(mean - 499.5), 4 * sd / std::sqrt(double(random))) << mean;
  EXPECT_LT(random_min, 20);
  EXPECT_GT(random_max, 980);
  EXPECT_LT(random_max, 1000);
}

TEST(Mlm, SameSeedAndEpochSameMasksOtherEpochOthers) {
  const BertInput e = example(400, 1);
  auto draw = [&](const MlmMasking& m, int64_t epoch, int64_t index) {
    std::vector<int64_t> ids = as_i64(e.ids), labels(ids.size());
    mask_tokens(m, epoch, index, ids, labels);
    return std::pair(ids, labels);
  };
  EXPECT_EQ(draw(masking(), 2, 5), draw(masking(), 2, 5));
  EXPECT_NE(draw(masking(), 2, 5).second, draw(masking(), 3, 5).second);   // another epoch
  EXPECT_NE(draw(masking(), 2, 5).second, draw(masking(), 2, 6).second);   // another example
  EXPECT_NE(draw(masking(), 2, 5).second, draw(masking(8), 2, 5).second);  // another seed
  // Position t's draws are its own: a shorter example is a prefix of the longer one's masks.
  std::vector<int64_t> ids = as_i64(e.ids), labels(ids.size());
  mask_tokens(masking(), 2, 5, std::span(ids).first(100), std::span(labels).first(100));
  const auto [all_ids, all_labels] = draw(masking(), 2, 5);
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 100),
            std::vector<int64_t>(all_labels.begin(), all_labels.begin() + 100));
}

TEST(Mlm, OptionsChecked) {
  std::vector<int64_t> ids = {5, 6}, labels(2), short_labels(1);
  MlmMasking m = masking();
  EXPECT_THROW(mask_tokens(m, 0, 0, ids, short_labels), Error);
  m.mask_id = 1000;
  EXPECT_THROW(mask_tokens(m, 0, 0, ids, labels), Error);
  m = masking(), m.mask_fraction = 0.95;  // with random 0.1: past 1
  EXPECT_THROW(mask_tokens(m, 0, 0, ids, labels), Error);
  m = masking(), m.vocab_size = 0;
  EXPECT_THROW(mask_tokens(m, 0, 0, ids, labels), Error);
  m = masking(), m.probability = 1, m.mask_fraction = 1, m.random_fraction = 0;
  mask_tokens(m, 0, 0, ids, labels);  // everything chosen, all [MASK]
  EXPECT_EQ(ids, (std::vector<int64_t>{kMask, kMask}));
  EXPECT_EQ(labels, (std::vector<int64_t>{5, 6}));
}

TEST(Mlm, CollatePadsWithTokenTypesAndAttentionMask) {
  const std::vector<BertInput> examples = {example(3, 1), example(9, 2, true), example(6, 3)};
  const MlmMasking m = masking();
  const std::vector<int64_t> indices = {0, 1, 2};
  const MlmBatch b = collate_mlm(examples, indices, 4, kPad, m);
  ASSERT_EQ(b.input_ids.shape(), (Shape{3, 12}));  // the longest: 9 + [CLS] + 2 [SEP]
  for (int64_t r = 0; r < 3; ++r) {
    const BertInput& e = examples[size_t(r)];
    const size_t n = e.ids.size();
    const std::vector<int64_t> ids = row(b.input_ids, r), types = row(b.token_type_ids, r),
                               attention = row(b.attention_mask, r), labels = row(b.labels, r);
    // The row is mask_tokens of the example alone: what else is in the batch does not matter.
    std::vector<int64_t> want = as_i64(e.ids), want_labels(n);
    mask_tokens(m, 4, r, want, want_labels);
    for (size_t t = 0; t < 12; ++t) {
      SCOPED_TRACE("row " + std::to_string(r) + " position " + std::to_string(t));
      EXPECT_EQ(ids[t], t < n ? want[t] : kPad);
      EXPECT_EQ(types[t], t < n ? e.token_types[t] : 0);
      EXPECT_EQ(attention[t], t < n ? 1 : 0);
      EXPECT_EQ(labels[t], t < n ? want_labels[t] : kIgnoreIndex);
    }
  }
  EXPECT_EQ(row(b.token_type_ids, 1), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  const std::vector<int64_t> just_two = {2};
  const MlmBatch alone = collate_mlm(examples, just_two, 4, kPad, m, 16);
  ASSERT_EQ(alone.labels.shape(), (Shape{1, 16}));
  std::vector<int64_t> padded = row(b.labels, 2);
  padded.resize(16, kIgnoreIndex);
  EXPECT_EQ(row(alone.labels, 0), padded);
  try {
    collate_mlm(examples, indices, 4, kPad, m, 8);
    ADD_FAILURE() << "expected a loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collate_mlm: example 1 has 12 ids, more than pad_to 8"),
              std::string::npos)
        << e.what();
  }
  const std::vector<int64_t> outside = {3};
  EXPECT_THROW(collate_mlm(examples, outside, 0, kPad, m), Error);
}

// The loader's epoch reaches the dataset: batches equal collate_mlm's for their indices and epoch,
// whatever the number of workers, and a DistributedSampler's ranks see the same rows.
TEST(Mlm, DatasetThroughTheDataLoader) {
  std::vector<BertInput> examples;
  for (uint32_t i = 0; i < 37; ++i) examples.push_back(example(5 + i % 20, i, i % 3 == 0));
  const MlmMasking m = masking(11);
  auto ds = std::make_shared<MlmDataset>(examples, 32, kPad, m);
  EXPECT_EQ(ds->size(), 37);
  const Example one = ds->get_for_epoch(5, 2);
  EXPECT_EQ(one.data.shape(), (Shape{3, 32}));
  EXPECT_EQ(one.target.shape(), (Shape{32}));

  std::vector<std::vector<MlmBatch>> by_workers;
  for (int64_t workers : {0, 3}) {
    DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .num_workers = workers, .seed = 5});
    std::vector<MlmBatch> seen;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      for (Batch& b : loader) {
        EXPECT_EQ(b.epoch, epoch);
        const MlmBatch full = mlm_batch(b);
        const MlmBatch want = collate_mlm(examples, b.indices, epoch, kPad, m, 32);
        EXPECT_EQ(full.input_ids.to_vector<int64_t>(), want.input_ids.to_vector<int64_t>());
        EXPECT_EQ(full.token_type_ids.to_vector<int64_t>(),
                  want.token_type_ids.to_vector<int64_t>());
        EXPECT_EQ(full.attention_mask.to_vector<int64_t>(),
                  want.attention_mask.to_vector<int64_t>());
        EXPECT_EQ(full.labels.to_vector<int64_t>(), want.labels.to_vector<int64_t>());
        const int64_t longest = ds->longest(b.indices);
        const MlmBatch cut = mlm_batch(b, longest);
        EXPECT_EQ(cut.labels.shape(), (Shape{int64_t(b.indices.size()), longest}));
        EXPECT_TRUE(cut.input_ids.is_contiguous());
        seen.push_back(cut);
      }
    }
    by_workers.push_back(seen);
  }
  ASSERT_EQ(by_workers[0].size(), by_workers[1].size());
  for (size_t k = 0; k < by_workers[0].size(); ++k)
    EXPECT_EQ(by_workers[0][k].input_ids.to_vector<int64_t>(),
              by_workers[1][k].input_ids.to_vector<int64_t>());

  // Two ranks: each row is the example's masks for that epoch, the same as one process draws.
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(
        37, DistributedSamplerOptions{.num_replicas = 2, .rank = rank, .seed = 5});
    DataLoader loader(ds, sampler, {.batch_size = 4, .num_workers = 2});
    loader.set_epoch(1);
    for (Batch& b : loader)
      EXPECT_EQ(mlm_batch(b).labels.to_vector<int64_t>(),
                collate_mlm(examples, b.indices, 1, kPad, m, 32).labels.to_vector<int64_t>());
  }
  EXPECT_THROW(mlm_batch(Batch{}), Error);
  EXPECT_THROW(MlmDataset(examples, 20, kPad, m), Error);  // examples of up to 27 ids
}
