// text_to_shards: a text file turned into a training and a validation token shard (llm.c's .bin
// format, data/token_shards.h) with any tokenizer, bytes by default. What `train_gpt --text`
// trains on. Leaves out: texts larger than memory (read whole) and vocabularies over 65536 ids
// (the shards hold uint16 tokens: an error).
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer.h"

namespace loom::data {

// What text_to_shards wrote.
struct TextShards {
  std::string train_path, val_path;  // out_dir/train_000000.bin, out_dir/val_000000.bin
  int64_t train_tokens = 0, val_tokens = 0;
};

// Reads `text_file` whole, splits it (the last `val_fraction` of its bytes is the validation
// text, the split moved back to the start of a UTF-8 character so both halves decode to valid
// text), tokenizes each half with `tok` (special-token text is ordinary text: encode_ordinary)
// and writes out_dir/train_000000.bin and out_dir/val_000000.bin, creating out_dir. Errors: a
// missing or empty file, val_fraction outside [0, 1), a text too short to leave a token on the
// training side, a vocabulary over 65536 ids.
TextShards text_to_shards(const std::string& text_file, const std::string& out_dir,
                          double val_fraction, const Tokenizer& tok);
// The same with ByteTokenizer: one token per byte.
TextShards text_to_shards(const std::string& text_file, const std::string& out_dir,
                          double val_fraction);

}  // namespace loom::data
