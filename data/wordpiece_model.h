// What a WordPiece tokenizer file says, as its readers (data/wordpiece_files.h) hand it to
// WordPieceTokenizer (data/wordpiece.h): the vocabulary, the unknown token and the continuation
// prefix, the normalizer's options, the special tokens, the decoder and BERT's [CLS]/[SEP] names.
// Leaves out: reading and encoding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/wordpiece_normalizer.h"

namespace loom::data {

struct WordPieceModel {
  std::string name;    // "tokenizer.json", "vocab.txt": for messages
  std::string source;  // the file it came from
  // token text (UTF-8) -> id, in file order; where a text comes twice the later id wins (as in
  // `tokenizers` and transformers' load_vocab), and the earlier id is no token's.
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  int64_t max_input_chars_per_word = 100;  // a longer word (in characters) is one [UNK]
  std::optional<BertNormalizerOptions> normalizer = BertNormalizerOptions{};  // nullopt: none
  // The added tokens, cut out of the text before normalizing (text -> id; ids may lie beyond the
  // vocabulary). All are special: never masked (data/mlm.h), dropped by decode(ids, true).
  std::vector<std::pair<std::string, int32_t>> specials;
  // The decoder: `tokenizers`' WordPiece decoder (Note [WordPiece decoding] in data/wordpiece.h),
  // or none (the tokens joined with spaces, `tokenizers`' default).
  bool wordpiece_decoder = true;
  std::string decoder_prefix = "##";
  bool decoder_cleanup = true;
  // BERT's post-processor: [CLS] A [SEP] (B [SEP]); the texts of its two tokens.
  std::string cls_token = "[CLS]", sep_token = "[SEP]";
  // The padding and mask tokens a training program asks for (data/mlm.h).
  std::string pad_token = "[PAD]", mask_token = "[MASK]";
};

}  // namespace loom::data
