// data/sampler: sequential and random orders, the DistributedSampler formulas (Note
// [DistributedSampler sizes] in data/sampler.h) for many (N, R), the exactly-once evaluation
// mode, and the saved position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"
#include "data/sampler.h"

using namespace loom;
using namespace loom::data;

namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

bool is_permutation_of_iota(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v == iota(int64_t(v.size()));
}

}  // namespace

TEST(Sampler, Sequential) {
  SequentialSampler s(7);
  EXPECT_EQ(s.size(), 7);
  EXPECT_EQ(s.indices(0), iota(7));
  EXPECT_EQ(s.indices(5), iota(7));
  EXPECT_TRUE(SequentialSampler(0).indices(0).empty());
}

TEST(Sampler, RandomIsAPermutationThatChangesWithEpochAndSeed) {
  RandomSampler s(1000, /*seed=*/42);
  std::vector<int64_t> e0 = s.indices(0), e1 = s.indices(1);
  EXPECT_TRUE(is_permutation_of_iota(e0));
  EXPECT_TRUE(is_permutation_of_iota(e1));
  EXPECT_NE(e0, iota(1000));
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, RandomSampler(1000, 42).indices(0));  // a pure function of (seed, epoch)
  EXPECT_NE(e0, RandomSampler(1000, 43).indices(0));
  EXPECT_EQ(e1, RandomSampler(1000, 43).indices(0));  // seeded with seed + epoch
  EXPECT_EQ(e0, random_permutation(1000, 42));
  EXPECT_EQ(RandomSampler(1, 9).indices(3), iota(1));
  EXPECT_TRUE(RandomSampler(0, 9).indices(3).empty());
}

TEST(Sampler, RandomPermutationIsUniform) {
  // All 24 orders of 4 elements, 24000 seeds: each should appear about 1000 times. A biased
  // shuffle (e.g. swapping with any slot instead of a slot <= i) fails this by a wide margin.
  std::map<std::vector<int64_t>, int> counts;
  for (uint64_t seed = 0; seed < 24000; ++seed) counts[random_permutation(4, seed)]++;
  EXPECT_EQ(counts.size(), 24u);
  double chi2 = 0;
  for (auto& [perm, c] : counts) chi2 += (c - 1000.0) * (c - 1000.0) / 1000.0;
  EXPECT_LT(chi2, 60.0);  // 23 degrees of freedom: p < 1e-4 above ~55
}

// ---------------------------------------------------------------- DistributedSampler

TEST(DistributedSampler, SizesPaddingAndDisjointnessFollowSpecs) {
  for (int64_t n : {0, 1, 2, 5, 10, 11, 17, 64, 101}) {
    for (int64_t R : {1, 2, 3, 4, 7, 8}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          SCOPED_TRACE(testing::Message() << "N=" << n << " R=" << R << " drop_last=" << drop_last
                                          << " shuffle=" << shuffle);
          // Note [DistributedSampler sizes], in floating point.
          int64_t num_samples = (drop_last && n % R != 0)
                                    ? int64_t(std::ceil(double(n - R) / double(R)))
                                    : int64_t(std::ceil(double(n) / double(R)));
          num_samples = std::max<int64_t>(num_samples, 0);
          const int64_t total = num_samples * R;
          if (n == 0 && total > 0) continue;  // nothing to pad from (not reachable: total is 0)
          std::vector<std::vector<int64_t>> per_rank;
          for (int64_t r = 0; r < R; ++r) {
            DistributedSampler s(n, {.num_replicas = R,
                                     .rank = r,
                                     .shuffle = shuffle,
                                     .seed = 7,
                                     .drop_last = drop_last});
            ASSERT_EQ(s.size(), num_samples);
            ASSERT_EQ(s.total_size(), total);
            per_rank.push_back(s.indices(3));
            ASSERT_EQ(int64_t(per_rank.back().size()), num_samples);
          }
          // Interleave back: rank r took global[r : total : R].
          std::vector<int64_t> global(static_cast<size_t>(total));
          for (int64_t r = 0; r < R; ++r)
            for (int64_t i = 0; i < num_samples; ++i)
              global[size_t(i * R + r)] = per_rank[size_t(r)][size_t(i)];
          if (total >= n) {
            // No sample lost; the first N are a permutation, the rest repeat from the head.
            std::vector<int64_t> head(global.begin(), global.begin() + n);
            ASSERT_TRUE(is_permutation_of_iota(head));
            if (!shuffle) {
              ASSERT_EQ(head, iota(n));
            }
            for (int64_t i = n; i < total; ++i)
              ASSERT_EQ(global[size_t(i)], global[size_t((i - n) % n)]) << i;
          } else {
            // drop_last: all distinct (the ranks are disjoint), and the tail of the permutation
            // dropped.
            ASSERT_TRUE(drop_last);
            std::set<int64_t> seen(global.begin(), global.end());
            ASSERT_EQ(int64_t(seen.size()), total);
            for (int64_t v : global) ASSERT_TRUE(v >= 0 && v < n);
            if (!shuffle) {
              ASSERT_EQ(global, iota(total));
            }
          }
          if (shuffle && n > 2) {
            DistributedSampler s(n,
                                 {.num_replicas = R, .rank = 0, .seed = 7, .drop_last = drop_last});
            // The epoch's permutation is random_permutation(n, seed + epoch).
            std::vector<int64_t> perm = random_permutation(n, 7 + 3);
            for (int64_t i = 0; i < std::min(total, n); ++i)
              ASSERT_EQ(global[size_t(i)], perm[size_t(i)]);
            if (num_samples >= 3) {  // (tiny shards may repeat by chance)
              EXPECT_NE(s.indices(3), s.indices(4));
            }
          }
        }
      }
    }
  }
}

TEST(DistributedSampler, ExactlyOnceEvaluationMode) {
  for (int64_t n : {0, 1, 5, 10, 11, 101}) {
    for (int64_t R : {1, 2, 3, 4, 7}) {
      for (bool shuffle : {false, true}) {
        SCOPED_TRACE(testing::Message() << "N=" << n << " R=" << R << " shuffle=" << shuffle);
        std::vector<int64_t> all;
        int64_t smallest = n, largest = 0;
        for (int64_t r = 0; r < R; ++r) {
          DistributedSampler s(
              n, {.num_replicas = R, .rank = r, .shuffle = shuffle, .exactly_once = true});
          std::vector<int64_t> mine = s.indices(0);
          ASSERT_EQ(int64_t(mine.size()), s.size());
          smallest = std::min<int64_t>(smallest, s.size());
          largest = std::max<int64_t>(largest, s.size());
          all.insert(all.end(), mine.begin(), mine.end());
        }
        EXPECT_EQ(int64_t(all.size()), n);  // each sample exactly once across ranks
        EXPECT_TRUE(is_permutation_of_iota(all));
        EXPECT_LE(largest - smallest, 1);
      }
    }
  }
}

TEST(DistributedSampler, BadOptionsAreNamed) {
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), Error);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 0, .rank = 0}), Error);
  try {
    DistributedSampler(10, {.num_replicas = 2, .rank = 0, .drop_last = true, .exactly_once = true});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exactly_once"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- position

TEST(Sampler, PositionResumesMidEpoch) {
  RandomSampler s(10, 5);
  s.set_epoch(2);
  std::vector<int64_t> full = s.indices(2);
  std::vector<int64_t> a = s.next(4);
  EXPECT_EQ(a, std::vector<int64_t>(full.begin(), full.begin() + 4));
  EXPECT_EQ(s.position(), 4);
  SamplerState saved = s.state();
  EXPECT_EQ(saved, (SamplerState{2, 4}));

  RandomSampler t(10, 5);  // a fresh process
  t.load_state(saved);
  t.set_epoch(2);  // the resumed loop calls set_epoch(epoch) again: the position is kept
  EXPECT_EQ(t.position(), 4);
  std::vector<int64_t> rest = t.next(100);
  EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + 4, full.end()));
  EXPECT_TRUE(t.next(3).empty());
  t.set_epoch(3);  // a new epoch starts from its beginning
  EXPECT_EQ(t.position(), 0);
  EXPECT_EQ(t.next(10), t.indices(3));

  EXPECT_THROW(t.set_position(11), Error);
  EXPECT_THROW(t.load_state({0, 12}), Error);
  EXPECT_THROW(t.set_epoch(-1), Error);

  DistributedSampler d(11, {.num_replicas = 3, .rank = 1});
  d.set_epoch(1);
  std::vector<int64_t> dfull = d.indices(1);
  d.next(2);
  DistributedSampler d2(11, {.num_replicas = 3, .rank = 1});
  d2.load_state(d.state());
  EXPECT_EQ(d2.next(10), std::vector<int64_t>(dfull.begin() + 2, dfull.end()));
}
