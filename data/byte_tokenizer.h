// The byte-level tokenizer (vocabulary 256: each byte of the UTF-8 text is one token). Leaves
// out: turning a text file into shards (data/text_shards.h), BPE (data/bpe_tokenizer.h) and
// special tokens (no end-of-text: 256 ids are all bytes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace loom::data {

// Also a Tokenizer (load_tokenizer("bytes")), with int32 ids; its own encode(text) and
// decode(uint16 tokens) keep the shards' uint16.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return kVocabSize; }

  // One token per byte: "é" (0xC3 0xA9) is two tokens, 195 and 169.
  std::vector<uint16_t> encode(std::string_view text) const;
  // The same as int32 ids; there are no special tokens, so `special` changes nothing.
  std::vector<int32_t> encode(std::string_view text, const SpecialTokens& special) const override;
  // The bytes back, as a string. A token >= 256 is an error naming it and its position. A slice
  // that cuts a multi-byte character gives its bytes as they are (a stream of decoded tokens
  // concatenates to valid UTF-8 again).
  std::string decode(std::span<const uint16_t> tokens) const;
  std::string decode(std::span<const int32_t> ids) const override;
  // A single byte is its own token; nothing else is one.
  std::optional<int32_t> find_token(std::string_view token) const override;
};

}  // namespace loom::data
