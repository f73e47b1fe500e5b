// BPE tokenizers as tiktoken and Hugging Face `tokenizers` run them: byte-level (GPT-2, cl100k,
// o200k, Llama 3; any tokenizer.json of that kind) and SentencePiece's as tokenizer.json writes it
// (Llama 2, Mistral, TinyLlama: Note [SentencePiece BPE] in data/metaspace.h): special tokens split
// out, the pre-tokenizer regex or the SentencePiece text handling, then BPE merges within each
// piece; decode back to bytes; the post-processor's template. Leaves out: reading the files
// (data/tiktoken_file.h, data/hf_tokenizer_json.h), training a vocabulary, and SentencePiece's own
// tokenizer.model files (protobuf; the tokenizer.json beside them is read instead).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/bpe_merges.h"
#include "data/bpe_model.h"
#include "data/bpe_presets.h"
#include "data/bpe_regex.h"
#include "data/bpe_token_map.h"
#include "data/metaspace.h"
#include "data/special_token_matcher.h"
#include "data/tokenizer.h"

namespace loom::data {

// Note [BPE encoding]
// encode(text): (1) special tokens: with SpecialTokens::refuse() the first special-token text not
// allowed is an error naming it and its byte offset; the allowed ones are cut out of the text,
// leftmost first and the longest of those starting there (Hugging Face's rule; tiktoken's
// vocabularies have no special token that is a prefix of another), each one id. (2) Each stretch
// between them is cut into pieces by the regex (Note [Pre-tokenizer regexes] in
// data/bpe_regex.h), after NFC when the file's normalizer asks for it. (3) A piece that is a token
// is that token (when whole_piece_first); else it starts as its bytes' tokens and merges (Note [BPE
// merge order] in data/bpe_merges.h); the tokens of merged pieces are kept for the rest of the call
// (up to 64K pieces of up to 64 bytes), since text repeats its words: 1.3 times as fast on KJV with
// cl100k, more with a small vocabulary. A byte without a token (only in a tokenizer.json trained
// without the whole byte alphabet) is an error naming it; Hugging Face would drop it silently. A
// SentencePiece BPE replaces steps (2) and (3) by Note [SentencePiece BPE] in data/metaspace.h.
// encode and decode are const and keep their state on the stack: one tokenizer serves many threads.
class BpeTokenizer final : public Tokenizer {
 public:
  // A tiktoken rank file run as `preset` (or as `format`: its own regex and special tokens).
  static BpeTokenizer from_tiktoken(const std::string& path, BpePreset preset);
  static BpeTokenizer from_tiktoken(const std::string& path, const TiktokenFormat& format);
  // A Hugging Face tokenizer.json (Note [tokenizer.json support] in data/hf_tokenizer_json.h).
  static BpeTokenizer from_hf_json(const std::string& path);
  // From a description. Errors name its source: a special token without text, a negative id, an id
  // that is an ordinary token's too (with other bytes), a regex that does not compile.
  explicit BpeTokenizer(BpeModel model);

  std::string name() const override;
  int64_t vocab_size() const override { return int64_t(bytes_.size()); }
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text, const SpecialTokens& special) const override;
  // Byte-level: the tokens' bytes. SentencePiece: the text, as Note [SentencePiece BPE] says.
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> find_token(std::string_view token) const override;
  // The tokenizer.json's post-processor template around `ids` (Llama 2's <s> in front); an error
  // naming the post-processor when loom cannot run it.
  std::vector<int32_t> post_process(std::vector<int32_t> ids) const override;

  // The bytes of one id (empty for an id that is no token); errors as decode's.
  std::string_view token_bytes(int32_t id) const;
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const {
    return specials_.tokens();
  }
  const std::string& pattern() const { return pattern_; }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct Scratch;  // one encode call's buffers and its cache of merged pieces
  void encode_stretch(std::string_view text, bool at_start, Scratch& scratch,
                      std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, Scratch& scratch, std::vector<int32_t>& out) const;
  void start_from_bytes(std::string_view piece, std::vector<int32_t>& ids) const;
  void start_from_chars(std::string_view word, std::vector<int32_t>& ids) const;
  void build_merges(const BpeModel& model);
  void build_metaspace(const BpeModel& model);
  std::string decode_text(std::span<const int32_t> ids) const;

  std::string name_, source_, pattern_;
  std::unique_ptr<BpeRegex> regex_;  // null: no pre-tokenizer regex
  BpeMerges merges_;
  bool whole_piece_first_ = true;
  bool nfc_ = false;                     // BpeModel::nfc
  BpeTokenMap ids_;                      // ordinary tokens: bytes -> id
  std::array<int32_t, 256> byte_ids_{};  // -1: no token for that byte
  std::vector<std::string> bytes_;       // id -> bytes, special tokens included
  SpecialTokenMatcher specials_;
  std::optional<Metaspace> metaspace_;  // SentencePiece's BPE; absent: byte-level
  bool cut_runs_ = false;  // an unsplit stretch cut by for_each_run (Note [SentencePiece BPE])
  std::array<int32_t, 256> fallback_ids_{};  // byte -> its <0xNN> token (-1: none)
  std::vector<int16_t> fallback_byte_;       // id -> the byte of a <0xNN> token (-1: none)
  BpeModel::Template single_;
};

}  // namespace loom::data
