// The files a WordPiece tokenizer comes in: Hugging Face's tokenizer.json of model.type
// "WordPiece" (bert-base-uncased's, one trained with `tokenizers`), and BERT's vocab.txt (one token
// a line), read into a WordPieceModel. Leaves out: SentencePiece and Unigram models, and writing
// files (`tokenizers` does that: scripts/make-wordpiece-fixtures.py).
#pragma once

#include <optional>
#include <string>

#include "data/wordpiece_model.h"

namespace loom::data {

// Note [WordPiece tokenizer.json]
// Read: model WordPiece (vocab, unk_token, continuing_subword_prefix, max_input_chars_per_word);
// normalizer BertNormalizer (its four options) or null; pre_tokenizer BertPreTokenizer;
// post_processor BERT's (TemplateProcessing "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B:1 [SEP]:1",
// whatever the two tokens are called, or BertProcessing) or null; decoder WordPiece (prefix,
// cleanup) or null; added_tokens, the special tokens, cut out of the raw text. Refused with an
// error naming the field and its value: any other normalizer, pre-tokenizer, post-processor or
// decoder, and an added token with lstrip, rstrip, single_word or normalized (matched in the
// normalized text). Not read: truncation and padding (a per-call setting in `tokenizers`; loom's
// encode returns every id, bert_input and the MLM batches take their lengths from the caller).
WordPieceModel read_hf_wordpiece_json(const std::string& path);

// A vocab.txt: one token a line, its id the line's number from 0; trailing whitespace (and "\r")
// is not part of the token (as `tokenizers` reads it). [PAD], [UNK], [CLS], [SEP] and [MASK],
// where present, are the special tokens (BertWordPieceTokenizer's and BertTokenizerFast's);
// [UNK] must be. The normalizer is `normalizer` (uncased by default, as bert-base-uncased).
WordPieceModel read_wordpiece_vocab_txt(const std::string& path,
                                        const BertNormalizerOptions& normalizer = {});

// The normalizer options transformers' tokenizer_config.json beside a vocab.txt states
// (do_lower_case, strip_accents, tokenize_chinese_chars; clean_text is always on): nullopt when the
// folder of `vocab_path` has no tokenizer_config.json. A field of the wrong type is an error naming
// the file and the field.
std::optional<BertNormalizerOptions> read_tokenizer_config(const std::string& vocab_path);

}  // namespace loom::data
