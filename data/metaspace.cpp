// Metaspace (data/metaspace.h): the normalization of Note [SentencePiece BPE] and the two small
// readers of text it needs. Leaves out: encoding words and decoding (data/bpe_tokenizer.cpp).
#include "data/metaspace.h"

namespace loom::data {

void Metaspace::normalize(std::string_view text, bool at_start, std::string& out) const {
  out.clear();
  if (text.empty()) return;
  const bool starts_marked = text.front() == ' ' || text.starts_with(replacement);
  bool front = false;
  switch (prepend) {
    case Prepend::kEvery:
      front = true;
      break;
    case Prepend::kAlways:
      front = !starts_marked;
      break;
    case Prepend::kFirst:
      front = !starts_marked && at_start;
      break;
    case Prepend::kNever:
      break;
  }
  if (front) out += replacement;
  for (char c : text) {
    if (c == ' ') {
      out += replacement;
    } else {
      out += c;
    }
  }
}

bool Metaspace::joins_before_mark(std::string_view token) const {
  for (size_t at = token.find(replacement, 1); at != std::string_view::npos;
       at = token.find(replacement, at + 1)) {
    const bool after_mark =
        at >= replacement.size() && token.substr(at - replacement.size()).starts_with(replacement);
    if (!after_mark) return true;
  }
  return false;
}

int Metaspace::fallback_byte(std::string_view t) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

size_t Metaspace::char_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xE  ? 3
                   : (c >> 3) == 0x1E ? 4
                                      : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

}  // namespace loom::data
