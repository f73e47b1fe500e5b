// data/bpe_merges: the merge loops against a naive one (every pair looked up again after each
// merge, the lowest rank, the leftmost of equals), on short pieces (the scan) and long ones (the
// heap), random merge tables and pieces; the order on hand-made cases; the table itself.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "data/bpe_merges.h"

using namespace loom::data;

namespace {

// Note [BPE merge order] in data/bpe_merges.h, written the slow and obvious way.
std::vector<int32_t> naive_merge(const BpeMerges& m, std::vector<int32_t> ids) {
  while (ids.size() > 1) {
    size_t best = 0;
    BpeMerges::Merge best_merge = BpeMerges::kNone;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const BpeMerges::Merge x = m.find(ids[i], ids[i + 1]);
      if (x.id >= 0 && x.rank < best_merge.rank) best = i, best_merge = x;
    }
    if (best_merge.id < 0) break;
    ids[best] = best_merge.id;
    ids.erase(ids.begin() + long(best) + 1);
  }
  return ids;
}

std::vector<int32_t> merged(const BpeMerges& m, std::vector<int32_t> ids) {
  m.apply(ids);
  return ids;
}

}  // namespace

TEST(BpeMerges, LowestRankFirstThenLeftmost) {
  BpeMerges m;
  m.set(1, 1, {5, 10});   // a a -> A
  m.set(10, 1, {3, 11});  // A a -> B
  m.set(2, 3, {1, 12});   // b c -> C, first
  // a a a: the leftmost a a merges first, then A a.
  EXPECT_EQ(merged(m, {1, 1, 1}), (std::vector<int32_t>{11}));
  EXPECT_EQ(merged(m, {1, 1, 1, 1}), (std::vector<int32_t>{11, 1}));
  EXPECT_EQ(merged(m, {1, 2, 3, 1, 1}), (std::vector<int32_t>{1, 12, 10}));
  EXPECT_EQ(merged(m, {7}), (std::vector<int32_t>{7}));
  EXPECT_EQ(merged(m, {}), (std::vector<int32_t>{}));
}

TEST(BpeMerges, SettingAPairAgainReplacesItsMerge) {
  BpeMerges m;
  EXPECT_EQ(m.find(1, 2).id, -1);  // empty table
  m.set(1, 2, {4, 9});
  m.set(1, 2, {0, 8});
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.find(1, 2).rank, 0);
  EXPECT_EQ(m.find(1, 2).id, 8);
  EXPECT_EQ(m.find(2, 1).id, -1);
  for (int32_t i = 0; i < 5000; ++i) m.set(i, i + 1, {i, 100000 + i});  // grows many times
  EXPECT_EQ(m.size(), 5000u);
  for (int32_t i = 0; i < 5000; ++i) ASSERT_EQ(m.find(i, i + 1).id, 100000 + i) << i;
}

// Random BPE vocabularies over 4 symbols: each new token merges two earlier ones, at rank = its
// id (tiktoken) or at a shuffled rank (a Hugging Face merges list need not follow ids); pieces
// of 1 to 400 tokens take both loops.
TEST(BpeMerges, BothLoopsMergeAsTheNaiveOne) {
  std::mt19937 rng(11);
  for (int table = 0; table < 20; ++table) {
    BpeMerges m;
    std::vector<int32_t> ranks(300);
    for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = int32_t(i);
    if (table % 2) std::shuffle(ranks.begin(), ranks.end(), rng);
    for (int32_t id = 4; id < 300; ++id) {
      const int32_t a = int32_t(rng() % uint32_t(id)), b = int32_t(rng() % uint32_t(id));
      if (m.find(a, b).id < 0) m.set(a, b, {ranks[size_t(id)], id});
    }
    for (int piece = 0; piece < 60; ++piece) {
      const size_t n = piece < 40 ? 1 + rng() % 130 : 129 + rng() % 272;
      std::vector<int32_t> ids(n);
      for (auto& x : ids) x = int32_t(rng() % 4);
      ASSERT_EQ(merged(m, ids), naive_merge(m, ids)) << "table " << table << ", piece of " << n;
    }
  }
}

// A long run of one symbol with a -> aa -> aaaa...: both loops pair from the left.
TEST(BpeMerges, LongRunsPairFromTheLeft) {
  BpeMerges m;
  m.set(0, 0, {0, 1});
  m.set(1, 1, {1, 2});
  m.set(2, 2, {2, 3});
  for (size_t n : {7u, 128u, 129u, 1000u}) {
    std::vector<int32_t> ids(n, 0);
    ASSERT_EQ(merged(m, ids), naive_merge(m, ids)) << n;
  }
  EXPECT_EQ(merged(m, std::vector<int32_t>(11, 0)), (std::vector<int32_t>{3, 1, 0}));
}
