// BERT's text steps before WordPiece, as Hugging Face `tokenizers` runs them: BertNormalizer
// (clean the text, pad CJK ideographs with spaces, strip accents, lower-case) and BertPreTokenizer
// (split on whitespace, each punctuation character a word of its own). Leaves out: the
// vocabulary lookup (data/wordpiece.h) and offsets into the original text (loom keeps none).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace loom::data {

// tokenizer.json's BertNormalizer fields; the defaults are bert-base-uncased's.
struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents = std::nullopt;  // null: strip accents when lower-casing
  bool lowercase = true;

  bool strips_accents() const { return strip_accents.value_or(lowercase); }
};

// Note [BERT normalization]
// bert_normalize runs, in this order, the steps `tokenizers`' BertNormalizer runs:
// 1. clean_text: drop NUL, U+FFFD and every character of category Cc, Cf, Co (control, format,
//    private use; U+0085 and U+200D too, but not tab, newline, carriage return); then every
//    White_Space character becomes a space (U+00A0, U+3000, U+2028, ...).
// 2. handle_chinese_chars: a space on each side of each CJK ideograph (the blocks CJK Unified
//    Ideographs, Extension A, B, C, D, E (from U+2B920, `tokenizers`' bound), F, and both
//    Compatibility Ideographs blocks; not kana, Hangul or Extension G). Each becomes its own word.
// 3. strip_accents (the option, or lowercase when it is null): canonical decomposition (NFD), then
//    every nonspacing mark (Mn) dropped: "Ångström" -> "Angstrom", Hangul syllables -> jamo.
// 4. lowercase: each character's full lowercase mapping, with no context ("İ" -> "i" + U+0307 when
//    accents are kept; capital sigma always to "σ", never the final "ς").
// The categories are utf8proc's (Unicode 15). `tokenizers` reads them from the unicode_categories
// crate, whose tables are Unicode 8.0's: a character assigned since Unicode 9.0 is, for it, no
// control, mark or punctuation. So the two differ on those few (U+08E2 ARABIC DISPUTED END OF
// AYAH, Cf since 9.0: loom drops it, `tokenizers` keeps it; the same for new marks and
// punctuation); on the texts of the fixtures they agree (tests/data/test_wordpiece_interop.cpp).
void bert_normalize(std::u32string_view text, const BertNormalizerOptions& options,
                    std::u32string& out);

// The ideograph blocks of Note [BERT normalization], step 2.
bool is_bert_chinese_char(char32_t c);
// BertPreTokenizer's punctuation: every ASCII character in 33-47, 58-64, 91-96, 123-126 (so "$",
// "+", "^", "`" too, which Unicode calls symbols) and every character of category P*.
bool is_bert_punctuation(char32_t c);

// Appends to `words` the words of `text` (views into it) as BertPreTokenizer cuts them: split on
// White_Space (which is dropped), then each punctuation character a word of its own.
void bert_pre_tokenize(std::u32string_view text, std::vector<std::u32string_view>& words);

}  // namespace loom::data
