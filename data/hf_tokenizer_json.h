// Hugging Face's tokenizer.json, the BPE kinds: byte-level (GPT-2's, Llama 3's, any trained with
// `tokenizers`' ByteLevel) and SentencePiece's (Llama 2's, Mistral's, TinyLlama's), read into a
// BpeModel with its post-processor's template; and which model a tokenizer.json holds. Leaves out:
// other models (WordPiece: data/wordpiece_files.h; Unigram), normalizers other than NFC and
// SentencePiece's, the pair template and BPE dropout.
#pragma once

#include <cstdint>
#include <string>

#include "data/bpe_model.h"

namespace loom::data {

// Note [tokenizer.json support]
// Read: model.type "BPE" with vocab and merges ("a b" strings or [a, b] pairs), ignore_merges;
// added_tokens, which become the special tokens (Hugging Face splits every added token out of the
// text, special or not; encode with SpecialTokens::allow() does the same). Then one of two kinds:
//  - byte-level: pre_tokenizer ByteLevel (use_regex: GPT-2's regex, kGpt2Pattern in
//    data/bpe_presets.h) or a Sequence of Split (a Regex or a String pattern, behavior
//    "Isolated", not inverted) and ByteLevel without its regex (Llama 3's, Qwen2's); decoder
//    ByteLevel or none; normalizer NFC (Qwen2's: each stretch composed before the regex) or none;
//  - SentencePiece (Note [SentencePiece BPE] in data/metaspace.h), when the pre_tokenizer is
//    Metaspace (replacement, prepend_scheme or add_prefix_space, split) or there is none and a
//    normalizer: Prepend("▁") and Replace(" " -> "▁"); model.byte_fallback, unk_token, fuse_unk;
//    decoder Metaspace, or a Sequence of Replace("▁" -> " "), ByteFallback, Fuse and Strip of
//    leading spaces, or none.
// post_processor: TemplateProcessing's single template, RobertaProcessing, BertProcessing,
// ByteLevel (changes no id) or a Sequence of them become BpeModel::single; another kind is named
// there, and post_process refuses it (encode does not need it).
// Refused with an error naming the field and its value: anything else that would change the ids
// (another normalizer, add_prefix_space, dropout, byte_fallback in a byte-level file, a word
// prefix or suffix, an added token with lstrip, rstrip or single_word, or "normalized" beside a
// normalizer).
BpeModel read_hf_tokenizer_json(const std::string& path);

// The model.type of a tokenizer.json ("BPE", "WordPiece", "Unigram"; "" when the field is absent,
// which older BPE files allow), read without building the whole document (the parse stops there).
// Errors name the file: missing, not JSON, no "model" object.
std::string read_hf_model_type(const std::string& path);

// GPT-2's byte-to-character map, which byte-level vocabularies are written in: bytes 33-126,
// 161-172 and 174-255 are the characters of the same code, the 68 others U+0100 onwards in byte
// order (a space is "Ġ", U+0120). -1 for a character that stands for no byte.
int byte_of_char(uint32_t code_point);

}  // namespace loom::data
