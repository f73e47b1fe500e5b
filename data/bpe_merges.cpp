// BpeMerges (data/bpe_merges.h): the hash table and the two merge loops of Note [BPE merge
// order], the scan for short pieces and the heap for long ones.
#include "data/bpe_merges.h"

#include <queue>

#include "core/error.h"

namespace loom::data {

void BpeMerges::grow() {
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<Merge> values = std::move(values_);
  const size_t capacity = keys.empty() ? 1024 : keys.size() * 2;
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, kNone);
  mask_ = capacity - 1;
  shift_ = 64 - __builtin_ctzll(capacity);
  count_ = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == kEmpty) continue;
    size_t slot = hash(keys[i]);
    while (keys_[slot] != kEmpty) slot = (slot + 1) & mask_;
    keys_[slot] = keys[i];
    values_[slot] = values[i];
    ++count_;
  }
}

void BpeMerges::set(int32_t left, int32_t right, Merge merge) {
  LOOM_CHECK(left >= 0 && right >= 0 && merge.id >= 0, "BpeMerges::set: ids must not be negative (",
             left, ", ", right, " -> ", merge.id, ")");
  if (2 * (count_ + 1) > keys_.size()) grow();
  const uint64_t key = pack(left, right);
  size_t slot = hash(key);
  while (keys_[slot] != kEmpty && keys_[slot] != key) slot = (slot + 1) & mask_;
  if (keys_[slot] == kEmpty) ++count_;
  keys_[slot] = key;
  values_[slot] = merge;
}

void BpeMerges::apply(std::vector<int32_t>& ids) const {
  if (ids.size() < 2) return;
  if (ids.size() <= kShortPiece) {
    apply_short(ids);
  } else {
    apply_long(ids);
  }
}

// tiktoken's loop: the merge of each adjacent pair, the lowest (leftmost) merged, its two
// neighbouring pairs looked up again.
void BpeMerges::apply_short(std::vector<int32_t>& ids) const {
  Merge merges[kShortPiece];
  size_t n = ids.size();
  for (size_t i = 0; i + 1 < n; ++i) merges[i] = find(ids[i], ids[i + 1]);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (merges[i].rank < merges[best].rank) best = i;
    if (merges[best].id < 0) break;
    ids[best] = merges[best].id;
    // Remove ids[best + 1]; the pairs right of it move down one (pair best is looked up below).
    for (size_t i = best + 1; i + 1 < n; ++i) ids[i] = ids[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) merges[i] = merges[i + 1];
    --n;
    if (best > 0) merges[best - 1] = find(ids[best - 1], ids[best]);
    if (best + 1 < n) merges[best] = find(ids[best], ids[best + 1]);
  }
  ids.resize(n);
}

// The same order through a min-heap of (rank, position) over a linked list of the tokens. A popped
// candidate still holds when both its tokens are unchanged (a token only changes by merging, and
// a merged token differs from both its halves).
void BpeMerges::apply_long(std::vector<int32_t>& ids) const {
  struct Candidate {
    int32_t rank;
    uint32_t pos;
    int32_t left, right, id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const size_t n = ids.size();
  constexpr uint32_t kEnd = ~uint32_t(0);
  std::vector<uint32_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? uint32_t(i + 1) : kEnd;
    prev[i] = i > 0 ? uint32_t(i - 1) : kEnd;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](uint32_t pos) {
    if (pos == kEnd || next[pos] == kEnd) return;
    const Merge m = find(ids[pos], ids[next[pos]]);
    if (m.id >= 0) heap.push({m.rank, pos, ids[pos], ids[next[pos]], m.id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(uint32_t(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const uint32_t right = next[c.pos];
    if (ids[c.pos] != c.left || right == kEnd || ids[right] != c.right) continue;  // stale
    ids[c.pos] = c.id;
    ids[right] = -1;  // removed
    next[c.pos] = next[right];
    if (next[right] != kEnd) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (ids[i] >= 0) ids[out++] = ids[i];
  ids.resize(out);
}

}  // namespace loom::data
