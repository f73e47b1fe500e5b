// The lookup from a token's bytes to its id that BPE encoding asks once per piece: a flat hash
// table (open addressing) over one buffer of all the tokens' bytes, about twice as fast as
// std::unordered_map<std::string, int32_t> on KJV with cl100k (docs/tokenizers.md). Leaves out:
// removing tokens (it is built once) and the merge table (data/bpe_merges.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

class BpeTokenMap {
 public:
  // Enters tokens[id] for every id whose bytes are not empty. Returns -1, or the id of the first
  // token whose bytes an earlier id already has (the map keeps the earlier).
  int64_t build(const std::vector<std::string>& tokens);

  // The id of the token with these bytes, or -1.
  int32_t find(std::string_view bytes) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(bytes);
    for (size_t slot = size_t(h >> shift_);; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.id < 0) return -1;
      if (s.tag == uint32_t(h) && s.size == bytes.size() &&
          std::memcmp(arena_.data() + s.offset, bytes.data(), bytes.size()) == 0)
        return s.id;
    }
  }
  size_t size() const { return count_; }

  // A fast hash of short byte strings: 8 bytes at a time, multiplied and mixed.
  static uint64_t hash(std::string_view bytes) {
    const char* p = bytes.data();
    size_t n = bytes.size();
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    for (; n >= 8; p += 8, n -= 8) h = mix(h ^ load(p, 8));
    if (n) h = mix(h ^ load(p, n) ^ (uint64_t(n) << 59));
    return mix(h);
  }

 private:
  struct Slot {
    uint32_t tag;     // the hash's low 32 bits
    uint32_t size;    // of the bytes
    uint32_t offset;  // into arena_
    int32_t id;       // -1: an empty slot
  };
  static uint64_t load(const char* p, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return v;
  }
  static uint64_t mix(uint64_t h) {  // splitmix64's finalizer
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
  }

  std::vector<Slot> slots_;  // at most half full
  std::string arena_;        // every token's bytes, one after the other
  size_t mask_ = 0, count_ = 0;
  int shift_ = 64;
};

}  // namespace loom::data
