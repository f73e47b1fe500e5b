// WordPiece tokenization as Hugging Face's BertTokenizerFast runs it (BERT's tokenizer): special
// tokens cut out, BERT's normalizer and pre-tokenizer (data/wordpiece_normalizer.h), then greedy
// longest-match-first WordPiece with the "##" continuation prefix within each word; decode as the
// WordPiece decoder; [CLS] A [SEP] (B [SEP]) inputs with token types. Leaves out: reading the
// files (data/wordpiece_files.h), training a vocabulary, offsets, and padding (data/mlm.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bert_inputs.h"
#include "data/special_token_matcher.h"
#include "data/tokenizer.h"
#include "data/wordpiece_model.h"

namespace loom::data {

// Note [WordPiece encoding]
// encode(text): (1) special tokens (the added tokens: [CLS], [SEP], [PAD], [MASK], [UNK]) found in
// the text, as Note [BPE encoding] in data/bpe_tokenizer.h: refused by default, cut out with
// SpecialTokens::allow() (what `tokenizers` always does; matched in the raw text, so "[cls]" is
// not one), plain text with as_text(). (2) Each stretch between them is decoded from UTF-8
// (invalid bytes as U+FFFD, which clean_text then drops), normalized (Note [BERT normalization] in
// data/wordpiece_normalizer.h) and cut into words (bert_pre_tokenize). (3) Each word of more than
// max_input_chars_per_word characters (100) is [UNK]. Otherwise, from its start: the longest
// vocabulary token that the rest of the word begins with, written with the prefix ("##ing") after
// the first piece; when no token fits at some point, the whole word is one [UNK] (not just that
// piece), as `tokenizers` does. encode adds no [CLS] or [SEP]: encode_single and encode_pair do.
// encode and decode are const and keep their state on the stack: one tokenizer serves many threads.
//
// Note [WordPiece decoding]
// decode(ids) is `tokenizers`' decode(ids, skip_special_tokens=False) with the file's decoder:
// the tokens' texts in order, each but the first joined with a space unless it starts with the
// prefix (which is dropped: "hell", "##o" -> "hello"); with cleanup (on for BERT) `tokenizers`'
// cleanup runs on each token with its space: " ." -> ".", and the same for "?", "!", ","; its
// other rules (" 's", " n't", " do not", ...) match no BERT token, whose pre-tokenizer cuts at
// every "'" and space. So decode(encode(x)) is the normalized text with single spaces, not x:
// "Hello, World!" -> "hello, world!", but "don't" -> "don ' t" and "3.14" -> "3. 14" (the space
// before a "." goes, the one after stays). decode(ids, true) also drops the special tokens' ids
// (skip_special_tokens=True). Without a decoder: the tokens joined by spaces. Unlike the
// byte-level tokenizers' decode (data/tokenizer.h), this is text, not the original bytes. An id
// outside the vocabulary or of no token is an error naming it and its position.
class WordPieceTokenizer final : public Tokenizer {
 public:
  // A Hugging Face tokenizer.json of model.type "WordPiece" (Note [WordPiece tokenizer.json] in
  // data/wordpiece_files.h).
  static WordPieceTokenizer from_hf_json(const std::string& path);
  // A vocab.txt (one token a line, id = line number), normalized as `normalizer` says
  // (bert-base-uncased's by default: lower-cased, accents stripped).
  static WordPieceTokenizer from_vocab_txt(const std::string& path,
                                           const BertNormalizerOptions& normalizer = {});
  // From a description. Errors name its source: an unknown token not in the vocabulary, a negative
  // id, a special token whose id is another token's.
  explicit WordPieceTokenizer(WordPieceModel model);

  std::string name() const override;
  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text, const SpecialTokens& special) const override;
  // Note [WordPiece decoding]: decode(ids) keeps special tokens, as the interface asks.
  std::string decode(std::span<const int32_t> ids) const override { return decode(ids, false); }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
  std::optional<int32_t> find_token(std::string_view token) const override;
  // [CLS] ids [SEP]: encode_single's ids without truncation.
  std::vector<int32_t> post_process(std::vector<int32_t> ids) const override;

  // [CLS] a [SEP] and [CLS] a [SEP] b [SEP] with their token types (data/bert_inputs.h), each text
  // encoded with `special`; max_length (0: none) cuts as Note [Longest-first truncation] in
  // data/bert_inputs.h. What `tokenizers` gives for encode(a, b) with BERT's post-processor.
  BertInput encode_single(std::string_view a, int64_t max_length = 0,
                          const SpecialTokens& special = {}) const;
  BertInput encode_pair(std::string_view a, std::string_view b, int64_t max_length = 0,
                        const SpecialTokens& special = {}) const;

  // The text of one id ("##ing"); errors as decode's.
  std::string_view token_text(int32_t id) const;
  // The ids of BERT's tokens; each an error naming the token when the vocabulary lacks it.
  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return token_id(model_.cls_token); }
  int32_t sep_id() const { return token_id(model_.sep_token); }
  int32_t pad_id() const { return token_id(model_.pad_token); }
  int32_t mask_id() const { return token_id(model_.mask_token); }
  // The ids of the special (added) tokens, ascending: what transformers' all_special_ids holds
  // for BERT, the positions MLM never masks.
  std::vector<int32_t> special_ids() const;
  const std::optional<BertNormalizerOptions>& normalizer() const { return model_.normalizer; }
  const WordPieceModel& model() const { return model_; }

 private:
  // The text between special tokens: normalize, pre-tokenize, WordPiece each word.
  void encode_stretch(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::u32string_view word, std::string& utf8, std::vector<size_t>& ends,
                   std::vector<int32_t>& out) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Map = std::unordered_map<std::string, int32_t, Hash, std::equal_to<>>;

  WordPieceModel model_;             // the description, its vocab moved out into the tables below
  Map start_;                        // every token, looked up at a word's start
  Map continuation_;                 // the tokens that start with the prefix, keyed without it
  std::vector<std::string> tokens_;  // id -> text ("##ing"), special tokens included
  std::vector<char> has_token_;      // id -> whether any token has it
  int32_t unk_id_ = -1;
  SpecialTokenMatcher specials_;
};

}  // namespace loom::data
