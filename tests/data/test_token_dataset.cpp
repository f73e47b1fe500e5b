// data/token_dataset: the windows of Note [Token windows] across shards, the dataset's checks
// (vocabulary, sequence length, model context) with the values they name, and the dataset in a
// DataLoader: batches are the sampler's windows with y = x shifted by one, and validation with
// exactly_once covers every target token once over 1, 2 or 3 ranks. The sampler's own properties
// (ranks disjoint, set_epoch, exact resume) are DistributedSampler's (tests/data/test_sampler.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataloader.h"
#include "data/sampler.h"
#include "data/token_dataset.h"
#include "support/errors.h"
#include "support/temp_files.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

// Shards of the given sizes whose tokens are all distinct (shard s, token i: 1000 s + i), so a
// token names its place; returns the paths.
std::vector<std::string> write_shards(const TempDir& dir, const std::vector<int64_t>& sizes,
                                      const std::string& prefix = "train") {
  std::vector<std::string> paths;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> t(static_cast<size_t>(sizes[s]));
    for (size_t i = 0; i < t.size(); ++i) t[i] = uint16_t(1000 * s + i);
    paths.push_back(dir.file(prefix + "_00000" + std::to_string(s) + ".bin"));
    write_token_shard(paths.back(), t);
  }
  return paths;
}

std::shared_ptr<const TokenDataset> make(const std::vector<std::string>& files, int64_t T,
                                         int64_t vocab = 50257, int64_t ctx = 1024) {
  return std::make_shared<const TokenDataset>(
      files, TokenDatasetOptions{.vocab_size = vocab, .seq_len = T, .max_context = ctx});
}

std::vector<int64_t> row(const Tensor& t, int64_t b) {
  const int64_t T = t.size(1);
  const int64_t* p = t.data<int64_t>() + b * T;
  return std::vector<int64_t>(p, p + T);
}

// Checks that rows of x, y (B, T) are the windows they name: x = window[:T], y = window[1:].
void expect_rows_are_windows(const TokenDataset& d, const Tensor& bx, const Tensor& by,
                             const std::vector<int64_t>& windows) {
  const int64_t B = int64_t(windows.size()), T = d.seq_len();
  ASSERT_EQ(bx.dtype(), kI64);
  ASSERT_EQ(by.dtype(), kI64);
  ASSERT_EQ(bx.shape(), (Shape{B, T}));
  ASSERT_EQ(by.shape(), (Shape{B, T}));
  for (int64_t i = 0; i < B; ++i) {
    TokenDataset::Location l = d.locate(windows[size_t(i)]);
    std::span<const uint16_t> shard = d.shard(l.shard).tokens();
    std::vector<int64_t> x = row(bx, i), y = row(by, i);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(x[size_t(t)], shard[size_t(l.start + t)]) << "row " << i << " t " << t;
      ASSERT_EQ(y[size_t(t)], shard[size_t(l.start + t + 1)]) << "row " << i << " t " << t;
      if (t + 1 < T) {
        ASSERT_EQ(y[size_t(t)], x[size_t(t + 1)]);  // y is x shifted by one
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- TokenDataset

TEST(TokenDataset, WindowsFollowTheNote) {
  TempDir dir;
  auto d = make(write_shards(dir, {33, 17, 9}), /*T=*/4);
  EXPECT_EQ(d->num_shards(), 3);
  EXPECT_EQ(d->num_tokens(), 59);
  EXPECT_EQ(d->num_windows(), 8 + 4 + 2);  // (n - 1) / T per shard
  EXPECT_EQ(d->locate(0).shard, 0);
  EXPECT_EQ(d->locate(7).start, 28);  // tokens 28..32: the shard's last
  EXPECT_EQ(d->locate(8).shard, 1);
  EXPECT_EQ(d->locate(8).start, 0);
  EXPECT_EQ(d->locate(13).shard, 2);
  EXPECT_EQ(d->locate(13).start, 4);
  std::span<const uint16_t> w = d->window(13);
  EXPECT_EQ(std::vector<uint16_t>(w.begin(), w.end()),
            (std::vector<uint16_t>{2004, 2005, 2006, 2007, 2008}));
  std::string e = error_of([&] { d->locate(14); });
  EXPECT_NE(e.find("window 14 is out of range for 14 windows"), std::string::npos) << e;
}

TEST(TokenDataset, SequenceLongerThanTheModelsContext) {
  TempDir dir;
  auto files = write_shards(dir, {5000});
  std::string e = error_of([&] { make(files, /*T=*/2048, 50257, /*ctx=*/1024); });
  EXPECT_NE(e.find("sequence length T = 2048 is larger than the model's context 1024"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(make(files, 1024, 50257, 1024));
  e = error_of([&] { make(files, 0); });
  EXPECT_NE(e.find("sequence length T = 0 must be positive"), std::string::npos) << e;
  e = error_of([&] { make(files, 8, 50257, 0); });
  EXPECT_NE(e.find("max_context 0 must be positive"), std::string::npos) << e;
  e = error_of([&] { make(files, 8, 70000); });
  EXPECT_NE(e.find("vocab_size 70000 is outside [1, 65536]"), std::string::npos) << e;
  e = error_of([&] { make({}, 8); });
  EXPECT_NE(e.find("no shard files"), std::string::npos) << e;
}

TEST(TokenDataset, AShardShorterThanOneWindow) {
  TempDir dir;
  auto files = write_shards(dir, {100, 64});
  EXPECT_NO_THROW(make(files, 63));
  std::string e = error_of([&] { make(files, 64); });
  EXPECT_NE(e.find(files[1] + " holds 64 tokens, fewer than T + 1 = 65"), std::string::npos) << e;
}

TEST(TokenDataset, ATokenOutsideTheVocabulary) {
  TempDir dir;
  auto files = write_shards(dir, {50, 300});  // shard 1's tokens are 1000..1299
  EXPECT_NO_THROW(make(files, 8, 1300));
  std::string e = error_of([&] { make(files, 8, 1200); });
  EXPECT_NE(e.find(files[1] + ": token 1200 at position 200 is outside the vocabulary [0, 1200)"),
            std::string::npos)
      << e;
}

TEST(TokenDataset, TheVocabularyScanReportsTheFirstBadTokenOfALargeShard) {
  TempDir dir;
  std::vector<uint16_t> t(3'000'000, 7);
  for (size_t i : {size_t(2'900'000), size_t(1'500'001), size_t(2'500'000), size_t(1'600'000)})
    t[i] = uint16_t(300 + i % 5);
  write_token_shard(dir.file("big.bin"), t);
  std::string e = error_of([&] { make({dir.file("big.bin")}, 16, 256); });
  EXPECT_NE(e.find("token 301 at position 1500001 is outside the vocabulary [0, 256)"),
            std::string::npos)
      << e;
}

TEST(TokenDataset, ABadShardIsNamed) {
  TempDir dir;
  auto files = write_shards(dir, {50});
  loom::test::write_bytes(dir.file("bad.bin"), "not a shard");
  files.push_back(dir.file("bad.bin"));
  std::string e = error_of([&] { make(files, 8); });
  EXPECT_NE(e.find(dir.file("bad.bin") + " is truncated: 11 bytes"), std::string::npos) << e;
}

TEST(TokenDataset, GlobIsSortedAndNamesAPatternThatMatchesNothing) {
  TempDir dir;
  auto files = write_shards(dir, {20, 20, 20});
  write_shards(dir, {20}, "val");
  EXPECT_EQ(glob_token_files(dir.path + "/train_*.bin"), files);
  EXPECT_EQ(glob_token_files(files[1]), std::vector<std::string>{files[1]});
  std::string e = error_of([&] { glob_token_files(dir.path + "/test_*.bin"); });
  EXPECT_NE(e.find("no file matches '" + dir.path + "/test_*.bin'"), std::string::npos) << e;
}

// ---------------------------------------------------------------- TokenBatchSampler

// ---------------------------------------------------------------- as a Dataset, in a DataLoader

TEST(TokenDataset, ADataLoaderGivesTheSamplersWindowsShiftedByOne) {
  TempDir dir;
  auto d = make(write_shards(dir, {101, 77, 40}), /*T=*/6);  // 16 + 12 + 6 windows
  EXPECT_EQ(d->size(), 34);
  // Rank 1 of 2, shuffled (seed + epoch), batches of 3: the rows are the sampler's windows.
  auto sampler = std::make_shared<DistributedSampler>(
      d->size(), DistributedSamplerOptions{
                     .num_replicas = 2, .rank = 1, .shuffle = true, .seed = 5, .drop_last = true});
  DataLoader loader(d, sampler, DataLoaderOptions{.batch_size = 3, .drop_last = true});
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> order = sampler->indices(epoch);
    int64_t b = 0;
    while (auto batch = loader.next()) {
      std::vector<int64_t> w(order.begin() + 3 * b, order.begin() + 3 * b + 3);
      expect_rows_are_windows(*d, batch->data, batch->target, w);
      ++b;
    }
    EXPECT_EQ(b, 17 / 3);
  }
  // get() is the same window as the batch path.
  Example e = d->get(20);
  expect_rows_are_windows(*d, e.data.view({1, 6}), e.target.view({1, 6}), {20});
  EXPECT_THROW(d->get(34), Error);
}

TEST(TokenDataset, ValidationWindowsEachOnceOverTheRanks) {
  TempDir dir;
  auto d = make(write_shards(dir, {131, 46}, "val"), 5);  // 26 + 9 = 35 windows
  for (int64_t R : {1, 2, 3}) {
    SCOPED_TRACE(R);
    std::multiset<int64_t> targets;
    for (int64_t r = 0; r < R; ++r) {
      auto s = std::make_shared<DistributedSampler>(
          d->size(), DistributedSamplerOptions{
                         .num_replicas = R, .rank = r, .shuffle = false, .exactly_once = true});
      DataLoader val(d, s, DataLoaderOptions{.batch_size = 4});
      for (auto& b : val) {
        std::vector<int64_t> y = b.target.to_vector<int64_t>();
        targets.insert(y.begin(), y.end());
      }
    }
    std::multiset<int64_t> all;
    for (int64_t i = 1; i <= 130; ++i) all.insert(i);  // shard 0: every token but its first
    for (int64_t i = 1; i <= 45; ++i) all.insert(1000 + i);
    EXPECT_EQ(targets, all);
  }
}
