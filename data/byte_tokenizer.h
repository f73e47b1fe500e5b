// The byte-level tokenizer (vocabulary 256: each byte of the UTF-8 text is one token) and
// text_to_shards, which turns a text file into a train and a validation token shard. Leaves out:
// BPE (data/bpe_tokenizer.h; examples/tokenize_shards.cpp writes its shards) and special tokens
// (no end-of-text: 256 ids are all bytes).
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

// What text_to_shards wrote.
struct TextShards {
  std::string train_path, val_path;  // out_dir/train_000000.bin, out_dir/val_000000.bin
  int64_t train_tokens = 0, val_tokens = 0;
};

// Reads `text_file` whole, tokenizes it with ByteTokenizer and writes out_dir/train_000000.bin
// (the text before the split) and out_dir/val_000000.bin (the last `val_fraction` of it),
// creating out_dir. The split is moved back to the start of a UTF-8 character, so both halves
// decode to valid text. Errors: a missing or empty file, val_fraction outside [0, 1), a text too
// short to leave a token on the training side.
TextShards text_to_shards(const std::string& text_file, const std::string& out_dir,
                          double val_fraction);

}  // namespace loom::data
