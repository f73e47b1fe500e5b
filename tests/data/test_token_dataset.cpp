// data/token_dataset: the windows of Note [Token windows] across shards, the dataset's checks
// (vocabulary, sequence length, model context) with the values they name, the batch sampler of
// Note [Token sampler] (slices of the data, y = x shifted by one, ranks disjoint and covering the
// one-rank epoch, set_epoch, exact resume) and the evaluation loader (every window once).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/token_dataset.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error";
  return "";
}

// Shards of the given sizes whose tokens are all distinct (shard s, token i: 1000 s + i), so a
// token names its place; returns the paths.
std::vector<std::string> write_shards(const TempDir& dir, const std::vector<int64_t>& sizes,
                                      const std::string& prefix = "train") {
  std::vector<std::string> paths;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> t(size_t(sizes[s]));
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

// Checks that batch rows are the windows they name: x = window[:T], y = window[1:].
void expect_rows_are_windows(const TokenDataset& d, const TokenBatch& b) {
  const int64_t B = int64_t(b.windows.size()), T = d.seq_len();
  ASSERT_EQ(b.x.dtype(), kI64);
  ASSERT_EQ(b.y.dtype(), kI64);
  ASSERT_EQ(b.x.shape(), (Shape{B, T}));
  ASSERT_EQ(b.y.shape(), (Shape{B, T}));
  for (int64_t i = 0; i < B; ++i) {
    TokenDataset::Location l = d.locate(b.windows[size_t(i)]);
    std::span<const uint16_t> shard = d.shard(l.shard).tokens();
    std::vector<int64_t> x = row(b.x, i), y = row(b.y, i);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(x[size_t(t)], shard[size_t(l.start + t)]) << "row " << i << " t " << t;
      ASSERT_EQ(y[size_t(t)], shard[size_t(l.start + t + 1)]) << "row " << i << " t " << t;
      if (t + 1 < T) {
        ASSERT_EQ(y[size_t(t)], x[size_t(t + 1)]);  // y is x shifted by one
      }
    }
  }
}

// All windows that `n` calls of next() hand out.
std::vector<int64_t> drawn(TokenBatchSampler& s, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    TokenBatch b = s.next();
    out.insert(out.end(), b.windows.begin(), b.windows.end());
  }
  return out;
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

TEST(TokenBatchSampler, BatchesAreWindowsOfTheDataShiftedByOne) {
  TempDir dir;
  auto d = make(write_shards(dir, {101, 77, 40}), /*T=*/6);
  TokenBatchSampler s(d, {.batch_size = 3, .seed = 5});
  EXPECT_EQ(d->num_windows(), 16 + 12 + 6);
  EXPECT_EQ(s.steps_per_epoch(), 34 / 3);
  for (int i = 0; i < 15; ++i) {  // past the end of the first epoch
    TokenBatch b = s.next();
    expect_rows_are_windows(*d, b);
    EXPECT_EQ(b.epoch, i / 11);
    EXPECT_EQ(b.index, i % 11);
  }
}

TEST(TokenBatchSampler, AnEpochIsAPermutationOfTheWindows) {
  TempDir dir;
  auto d = make(write_shards(dir, {97, 49}), /*T=*/4);  // 24 + 12 = 36 windows
  TokenBatchSampler s(d, {.batch_size = 4, .seed = 1});
  EXPECT_EQ(s.steps_per_epoch(), 9);
  std::vector<int64_t> e0 = drawn(s, 9), sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(36);
  std::iota(all.begin(), all.end(), int64_t(0));
  EXPECT_EQ(sorted, all);
  EXPECT_NE(e0, all);                        // shuffled
  EXPECT_EQ(e0, random_permutation(36, 1));  // seeded with seed + epoch
  EXPECT_EQ(s.batches_left(), 0);
  EXPECT_EQ(drawn(s, 9), random_permutation(36, 2));  // epoch 1
}

TEST(TokenBatchSampler, RanksAreDisjointAndCoverTheOneRankEpoch) {
  TempDir dir;
  // 48 windows: B = 4 divides each of 2 ranks' 24. 50 windows with 3 ranks: 16 each, 4 steps,
  // 48 in all, as one rank's 12 steps of 4.
  for (auto [n, R] : {std::pair<int64_t, int64_t>{48, 2}, {50, 3}}) {
    SCOPED_TRACE(testing::Message() << n << " windows, " << R << " ranks");
    auto d = make(write_shards(dir, {n * 5 + 1}, "w" + std::to_string(n)), /*T=*/5);
    ASSERT_EQ(d->num_windows(), n);
    for (int64_t epoch : {0, 3}) {
      TokenBatchSampler one(d, {.batch_size = 4, .seed = 9});
      one.set_epoch(epoch);
      std::vector<int64_t> single = drawn(one, one.steps_per_epoch());
      std::set<int64_t> ranks;
      size_t total = 0;
      for (int64_t r = 0; r < R; ++r) {
        TokenBatchSampler s(d, {.batch_size = 4, .num_replicas = R, .rank = r, .seed = 9});
        EXPECT_EQ(s.steps_per_epoch(), n / R / 4);
        s.set_epoch(epoch);
        std::vector<int64_t> mine = drawn(s, s.steps_per_epoch());
        total += mine.size();
        ranks.insert(mine.begin(), mine.end());
      }
      EXPECT_EQ(ranks.size(), total);  // disjoint
      EXPECT_EQ(ranks, std::set<int64_t>(single.begin(), single.end()));
    }
  }
}

TEST(TokenBatchSampler, SetEpochAndSeedChangeTheOrder) {
  TempDir dir;
  auto d = make(write_shards(dir, {801}), /*T=*/8);  // 100 windows
  TokenBatchSampler a(d, {.batch_size = 10, .seed = 3});
  std::vector<int64_t> e0 = a.windows(0);
  const std::vector<int64_t> e1 = a.windows(1);
  EXPECT_NE(e0, e1);
  a.set_epoch(1);
  EXPECT_EQ(a.next().windows, std::vector<int64_t>(e1.begin(), e1.begin() + 10));
  a.set_epoch(1);  // the current epoch keeps its position
  EXPECT_EQ(a.state(), (SamplerState{1, 10}));
  a.set_epoch(0);
  EXPECT_EQ(a.state(), (SamplerState{0, 0}));
  EXPECT_EQ(a.next().windows, std::vector<int64_t>(e0.begin(), e0.begin() + 10));
  TokenBatchSampler b(d, {.batch_size = 10, .seed = 4});
  EXPECT_NE(b.windows(0), e0);
  EXPECT_EQ(b.windows(0), e1);  // seed + epoch
}

TEST(TokenBatchSampler, ARestoredPositionGivesTheSameNextBatches) {
  TempDir dir;
  auto d = make(write_shards(dir, {301, 150}), /*T=*/6);  // 50 + 24 windows
  const TokenSamplerOptions opt{.batch_size = 4, .num_replicas = 2, .rank = 1, .seed = 11};
  for (int64_t stop : {0, 3, 8, 9, 20}) {  // 9 steps per epoch: 9 is the end of epoch 0
    SCOPED_TRACE(stop);
    TokenBatchSampler a(d, opt);
    ASSERT_EQ(a.steps_per_epoch(), 9);
    drawn(a, stop);
    SamplerState saved = a.state();
    TokenBatchSampler b(d, opt);
    b.load_state(saved);
    EXPECT_EQ(b.state(), saved);
    for (int i = 0; i < 12; ++i) {
      TokenBatch x = a.next(), y = b.next();
      ASSERT_EQ(x.windows, y.windows) << "batch " << i << " after the restore";
      EXPECT_EQ(x.epoch, y.epoch);
      EXPECT_EQ(x.index, y.index);
      EXPECT_EQ(row(x.x, 3), row(y.x, 3));
      EXPECT_EQ(row(x.y, 0), row(y.y, 0));
    }
  }
  TokenBatchSampler c(d, opt);
  std::string e = error_of([&] { c.load_state({0, 6}); });
  EXPECT_NE(e.find("position 6 is not a whole number of batches of 4 within an epoch of 9"),
            std::string::npos)
      << e;
  e = error_of([&] { c.load_state({0, 40}); });
  EXPECT_NE(e.find("position 40"), std::string::npos) << e;
}

TEST(TokenBatchSampler, TooFewWindowsForOneBatchPerRank) {
  TempDir dir;
  auto d = make(write_shards(dir, {41}), /*T=*/8);  // 5 windows
  std::string e = error_of([&] { TokenBatchSampler(d, {.batch_size = 2, .num_replicas = 3}); });
  EXPECT_NE(e.find("5 windows of T = 8 (41 tokens in 1 shard(s)) give each of 3 rank(s) 1, fewer "
                   "than one batch of 2"),
            std::string::npos)
      << e;
  e = error_of([&] { TokenBatchSampler(d, {.batch_size = 2, .num_replicas = 2, .rank = 2}); });
  EXPECT_NE(e.find("rank 2 is outside [0, 2)"), std::string::npos) << e;
}

// ---------------------------------------------------------------- TokenEvalLoader

TEST(TokenEvalLoader, CoversTheValidationDataOnce) {
  TempDir dir;
  auto files = write_shards(dir, {131, 46}, "val");  // T = 5: 26 + 9 = 35 windows
  auto d = make(files, 5);
  for (int64_t R : {1, 2, 3}) {
    SCOPED_TRACE(R);
    std::multiset<int64_t> windows, targets;
    for (int64_t r = 0; r < R; ++r) {
      TokenEvalLoader val(d, /*batch_size=*/4, R, r);
      const int64_t mine = (35 - r + R - 1) / R;
      EXPECT_EQ(val.size(), (mine + 3) / 4);
      int64_t batches = 0;
      for (TokenBatch& b : val) {
        expect_rows_are_windows(*d, b);
        EXPECT_EQ(b.index, batches++);
        for (size_t i = 0; i < b.windows.size(); ++i) {
          EXPECT_EQ(b.windows[i] % R, r);
          windows.insert(b.windows[i]);
          std::vector<int64_t> y = row(b.y, int64_t(i));
          targets.insert(y.begin(), y.end());
        }
      }
      EXPECT_EQ(batches, val.size());
    }
    std::multiset<int64_t> all_windows, all_targets;
    for (int64_t w = 0; w < 35; ++w) all_windows.insert(w);
    for (int64_t i = 1; i <= 130; ++i) all_targets.insert(i);  // shard 0: its tail 0
    for (int64_t i = 1; i <= 45; ++i) all_targets.insert(1000 + i);
    EXPECT_EQ(windows, all_windows);
    EXPECT_EQ(targets, all_targets);
  }
}

TEST(TokenEvalLoader, MaxBatchesAndRewind) {
  TempDir dir;
  auto d = make(write_shards(dir, {201}), /*T=*/4);  // 50 windows
  TokenEvalLoader val(d, 3, /*num_replicas=*/2, /*rank=*/0, /*max_batches=*/2);
  EXPECT_EQ(val.size(), 2);
  std::optional<TokenBatch> a = val.next(), b = val.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->windows, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(b->windows, (std::vector<int64_t>{6, 8, 10}));
  EXPECT_FALSE(val.next());  // the end, then a rewind
  std::optional<TokenBatch> again = val.next();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->windows, a->windows);
  // The last batch of a whole pass is smaller: 25 windows on rank 1, 8 batches of 3 and 1.
  TokenEvalLoader all(d, 3, 2, 1);
  EXPECT_EQ(all.size(), 9);
  int64_t n = 0, last = 0;
  for (TokenBatch& x : all) {
    ++n;
    last = int64_t(x.windows.size());
  }
  EXPECT_EQ(n, 9);
  EXPECT_EQ(last, 1);
}
