// The text side of a SentencePiece BPE as Hugging Face's tokenizer.json writes it (Llama 2,
// Mistral, TinyLlama, and other models converted from a SentencePiece BPE): spaces become "▁", a
// "▁" goes in front of the text, words start as their characters, a character outside the
// vocabulary becomes its bytes' <0xNN> tokens or <unk>; decoding undoes it. BpeTokenizer
// (data/bpe_tokenizer.h) runs it when its BpeModel has one. Leaves out: the merges
// (data/bpe_merges.h), reading tokenizer.json (data/hf_tokenizer_json.h), SentencePiece's own
// tokenizer.model (protobuf: not read) and Unigram models (T5's, ALBERT's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::data {

// Note [SentencePiece BPE]
// A SentencePiece BPE vocabulary holds text, not bytes: "▁the" is " the", "<0x0A>" the byte 0x0A.
// Encoding a stretch of text between special tokens, as `tokenizers` does for such a file:
//  1. Every space (U+0020 only) becomes the replacement "▁" (U+2581): the normalizer Replace or the
//     pre-tokenizer Metaspace, whichever the file has.
//  2. A "▁" in front, as `prepend` says: the normalizer Prepend puts it before every non-empty
//     stretch (Llama 2's "legacy" layout: "<s>Hi" -> "<s>", "▁Hi"); Metaspace's prepend_scheme
//     "always" before a stretch that does not already start with "▁", "first" the same but only
//     for the stretch at the start of the text (transformers' legacy=False: "<s>Hi" -> "<s>",
//     "Hi"), "never" nowhere.
//  3. Words: with Metaspace's split, each "▁" starts a new word ("▁a▁▁b" -> "▁a", "▁", "▁b");
//     without (Llama 2, Mistral) the whole stretch is one word, which BPE merges as a whole. When
//     no token holds another character followed by "▁" (true of Llama 2's vocabulary, whose "▁▁"
//     tokens are runs of marks), no merge can join a character to the "▁" after it, so BpeTokenizer
//     cuts the stretch before each "▁" that follows another character (for_each_run): the same ids,
//     13 times as fast on the KJV text as merging it whole (its heap over 4 MB of text).
//  4. A word starts as the tokens of its characters (UTF-8; an invalid byte is a character of its
//     own). A character without a token becomes the <0xNN> tokens of its bytes with byte_fallback,
//     else `unk` (runs of them one <unk> with fuse_unk), else loom refuses it with an error naming
//     it (Hugging Face drops it silently). Then the merges, by rank (Note [BPE merge order]).
// Decoding: each "▁" becomes a space and each <0xNN> token its byte (the decoders Replace and
// ByteFallback), then up to `strip_leading` spaces are cut from the start (Strip; Llama's 1, which
// takes back the "▁" of step 2). Metaspace's decoder instead drops the first token's "▁"s. Unlike
// `tokenizers`, <0xNN> bytes that are not valid UTF-8 stay bytes (not U+FFFD each) and a <unk>
// waiting to be fused is written before the <0xNN> tokens of a later character (`tokenizers`
// writes it after them; only a vocabulary missing some <0xNN> tokens can tell).
struct Metaspace {
  enum class Prepend {
    kEvery,   // the normalizer Prepend: every non-empty stretch
    kAlways,  // Metaspace "always": a stretch not starting with "▁"
    kFirst,   // Metaspace "first": the same, the stretch at the text's start only
    kNever,
  };
  std::string replacement = "\u2581";
  Prepend prepend = Prepend::kEvery;
  bool split = false;          // each "▁" starts a word; else a stretch is one word
  bool byte_fallback = false;  // characters without a token as their bytes' <0xNN> tokens
  int32_t unk = -1;            // else this token (-1: none, an error)
  bool fuse_unk = false;       // a run of unknown characters is one `unk`
  // Decoding.
  bool decode_replacement = true;     // "▁" -> " " (decoder Replace or Metaspace)
  bool decode_byte_fallback = true;   // <0xNN> -> its byte (decoder ByteFallback)
  int strip_leading = 1;              // spaces cut from the decoded text's start (decoder Strip)
  bool first_token_unmarked = false;  // Metaspace's decoder: the first token's "▁"s dropped

  // Steps 1 and 2 for the stretch `text`; at_start: it begins the text being encoded.
  void normalize(std::string_view text, bool at_start, std::string& out) const;

  // Step 3: calls on_word(word) for each word of a normalized stretch.
  template <typename F>
  void for_each_word(std::string_view normalized, F&& on_word) const {
    if (!split) {
      if (!normalized.empty()) on_word(normalized);
      return;
    }
    size_t start = 0;
    for (size_t at = normalized.find(replacement, 1); at != std::string_view::npos;
         at = normalized.find(replacement, at + 1)) {
      if (at > start) on_word(normalized.substr(start, at - start));
      start = at;
    }
    if (start < normalized.size()) on_word(normalized.substr(start));
  }

  // Calls on_word(word) for the words of a normalized stretch cut before each "▁" that follows
  // another character ("▁a▁▁b" -> "▁a", "▁▁b"): step 3's shortcut for an unsplit stretch.
  template <typename F>
  void for_each_run(std::string_view normalized, F&& on_word) const {
    size_t start = 0;
    for (size_t at = normalized.find(replacement, 1); at != std::string_view::npos;
         at = normalized.find(replacement, at + 1)) {
      const bool after_mark = at >= replacement.size() &&
                              normalized.substr(at - replacement.size()).starts_with(replacement);
      if (after_mark) continue;
      on_word(normalized.substr(start, at - start));
      start = at;
    }
    if (start < normalized.size()) on_word(normalized.substr(start));
  }
  // Whether `token` holds a character other than "▁" followed by "▁" (for_each_run is exact only
  // for a vocabulary with no such token).
  bool joins_before_mark(std::string_view token) const;

  // The byte of a byte-fallback token's text ("<0x0A>" -> 10), or -1 for any other text.
  static int fallback_byte(std::string_view token);
  // The length of the UTF-8 character at s[i] (1 for a byte that starts none).
  static size_t char_length(std::string_view s, size_t i);
};

}  // namespace loom::data
