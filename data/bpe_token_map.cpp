// BpeTokenMap::build (data/bpe_token_map.h): the arena and the table, sized once.
#include "data/bpe_token_map.h"

#include "core/error.h"

namespace loom::data {

int64_t BpeTokenMap::build(const std::vector<std::string>& tokens) {
  size_t n = 0, bytes = 0;
  for (const std::string& t : tokens) n += !t.empty(), bytes += t.size();
  LOOM_CHECK(bytes < (size_t(1) << 32), "BpeTokenMap: the tokens hold ", bytes,
             " bytes, more than 4 GiB");
  size_t capacity = 1024;
  while (capacity < 2 * n) capacity *= 2;
  slots_.assign(capacity, Slot{0, 0, 0, -1});
  mask_ = capacity - 1;
  shift_ = 64 - __builtin_ctzll(capacity);
  arena_.clear();
  arena_.reserve(bytes);
  count_ = 0;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    if (t.empty()) continue;
    if (find(t) >= 0) return int64_t(id);
    const uint64_t h = hash(t);
    size_t slot = size_t(h >> shift_);
    while (slots_[slot].id >= 0) slot = (slot + 1) & mask_;
    slots_[slot] = Slot{uint32_t(h), uint32_t(t.size()), uint32_t(arena_.size()), int32_t(id)};
    arena_ += t;
    ++count_;
  }
  return -1;
}

}  // namespace loom::data
