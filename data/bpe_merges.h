// The merge table of a BPE tokenizer, a flat hash map from a pair of adjacent token ids to the
// merge's rank and the merged token's id, and the merge loop that turns one piece's byte tokens
// into its final tokens. Leaves out: where the pairs come from (data/bpe_tokenizer.cpp builds them
// from a rank file or a merges list) and splitting text into pieces (data/bpe_regex.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace loom::data {

// Note [BPE merge order]
// A piece starts as the tokens of its bytes. While some adjacent pair of tokens merges, the pair
// of lowest rank merges, the leftmost of equal ranks, into one token; its neighbours then pair
// with the new token. That is tiktoken's byte_pair_merge (ranks are the merged token's id: the pair
// x, y merges when the bytes x + y are a token) and Hugging Face's BPE::merge_word (ranks are the
// merges list's order). tiktoken looks the bytes x + y up in a map of byte strings; loom looks the
// pair of ids up instead, having entered every split of every token into two tokens (same
// answers: a part of a piece is always a token, so its bytes and its id say the same). Pieces up
// to kShortPiece bytes merge as tiktoken does, scanning for the lowest rank after each merge
// (O(n^2), fast for words); longer ones (runs of spaces or digits, text without spaces) through a
// min-heap of candidate merges, O(n log n), in the same order.
class BpeMerges {
 public:
  struct Merge {
    int32_t rank;  // lower merges first
    int32_t id;    // the merged token
  };
  static constexpr Merge kNone{std::numeric_limits<int32_t>::max(), -1};
  static constexpr size_t kShortPiece = 128;

  // Enters a pair; entering the same pair again replaces its merge (as Hugging Face's map does).
  void set(int32_t left, int32_t right, Merge merge);
  Merge find(int32_t left, int32_t right) const {
    if (keys_.empty()) return kNone;
    const uint64_t key = pack(left, right);
    for (size_t slot = hash(key);; slot = (slot + 1) & mask_) {
      if (keys_[slot] == key) return values_[slot];
      if (keys_[slot] == kEmpty) return kNone;
    }
  }
  size_t size() const { return count_; }

  // Merges `ids` in place, Note [BPE merge order].
  void apply(std::vector<int32_t>& ids) const;

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  size_t hash(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow();
  void apply_short(std::vector<int32_t>& ids) const;
  void apply_long(std::vector<int32_t>& ids) const;

  std::vector<uint64_t> keys_;  // open addressing, linear probing, at most half full
  std::vector<Merge> values_;
  size_t mask_ = 0, count_ = 0;
  int shift_ = 64;
};

}  // namespace loom::data
