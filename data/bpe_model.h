// What a byte-level BPE tokenizer file says, as its readers hand it to BpeTokenizer: the tokens'
// bytes by id, how pairs merge, the special tokens and the pre-tokenizer regex. Leaves out: the
// readers (data/tiktoken_file.h, data/hf_tokenizer_json.h) and encoding (data/bpe_tokenizer.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::data {

struct BpeModel {
  std::string name;    // "cl100k_base", "tokenizer.json": for messages
  std::string source;  // the file it came from
  // id -> bytes of the ordinary tokens (those BPE builds); an empty string: no token has the id.
  std::vector<std::string> tokens;
  // How adjacent tokens merge (Note [BPE merge order] in data/bpe_merges.h). Empty: tiktoken's
  // rule, tokens x, y merge into the token whose bytes are x + y, at that token's id as rank.
  // Otherwise Hugging Face's: merges[r] merges left, right into `merged` at rank r.
  struct Merge {
    int32_t left, right, merged;
  };
  std::vector<Merge> merges;
  // A piece that is a token is that token, before any merging: tiktoken always, Hugging Face
  // with "ignore_merges" (Llama 3's tokenizer.json).
  bool whole_piece_first = true;
  std::vector<std::pair<std::string, int32_t>> specials;  // text -> id, split out first
  std::string pattern;  // the pre-tokenizer regex; empty: a text is one piece
};

}  // namespace loom::data
