// What a BPE tokenizer file says, as its readers hand it to BpeTokenizer: the tokens' bytes (or,
// for a SentencePiece BPE, text) by id, how pairs merge, the special tokens, the pre-tokenizer
// regex or the SentencePiece text handling, and the post-processor's template. Leaves out: the
// readers (data/tiktoken_file.h, data/hf_tokenizer_json.h) and encoding (data/bpe_tokenizer.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/metaspace.h"

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
  bool nfc = false;     // the normalizer NFC (Qwen2's): each stretch composed before the regex
  // A SentencePiece BPE (Note [SentencePiece BPE] in data/metaspace.h): `tokens` are text, the
  // pattern is empty. Absent: byte-level.
  std::optional<Metaspace> metaspace;
  // The post-processor's template for one text (Llama 2's "<s> $A", RoBERTa's "<s> $A </s>"): the
  // ids that go before and after its tokens. `unsupported` names a post-processor loom cannot run.
  struct Template {
    std::vector<int32_t> before, after;
    std::string unsupported;
  };
  Template single;
};

}  // namespace loom::data
