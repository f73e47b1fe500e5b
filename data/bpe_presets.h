// The named byte-level BPE formats of tiktoken rank files: each preset's pre-tokenizer regex and
// special tokens (GPT-2 / r50k_base, cl100k_base, o200k_base, Llama 3), as tiktoken and Llama 3's
// reference tokenizer define them. Leaves out: the ranks (the file's) and running the regex
// (data/bpe_regex.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::data {

enum class BpePreset { kR50k, kCl100k, kO200k, kLlama3 };

// How a tiktoken rank file is run: its regex and its special tokens. A preset gives one
// (bpe_preset_format); a caller may also write its own.
struct TiktokenFormat {
  std::string name;     // "cl100k_base"
  std::string pattern;  // the pre-tokenizer regex, in the syntax tiktoken and PCRE2 share
  std::vector<std::pair<std::string, int32_t>> specials;  // text -> id
};

// "r50k_base" (or "gpt2", "r50k"), "cl100k_base" ("cl100k"), "o200k_base" ("o200k"), "llama3";
// an error lists the names for anything else.
BpePreset parse_bpe_preset(std::string_view name);
std::string_view bpe_preset_name(BpePreset preset);

// The preset's regex and special tokens. Llama 3 numbers its 256 special tokens from
// `num_base_tokens` (the rank file's size: 128000 for Llama 3's); the others have fixed ids.
TiktokenFormat bpe_preset_format(BpePreset preset, int32_t num_base_tokens);

// GPT-2's regex as its release and Hugging Face's ByteLevel pre-tokenizer (use_regex) write it;
// tiktoken's r50k_base is the same split, written with possessive quantifiers.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace loom::data
