// bert_normalize and bert_pre_tokenize (data/wordpiece_normalizer.h): the steps of Note [BERT
// normalization] over code points, the Unicode properties from data/unicode_text.h.
// Leaves out: the other normalizers of tokenizer.json (NFC, NFKC, Replace, ...): refused when read.
#include "data/wordpiece_normalizer.h"

#include "data/unicode_text.h"

namespace loom::data {

namespace {

// BertNormalizer's is_control: Cc, Cf, Co (and Cs), but not the whitespace controls.
bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return is_other(c);
}

// Steps 1 and 2 of Note [BERT normalization].
void clean_and_pad(std::u32string_view text, const BertNormalizerOptions& opt,
                   std::u32string& out) {
  out.reserve(text.size());
  for (char32_t c : text) {
    if (opt.clean_text) {
      if (c == 0 || c == 0xFFFD || is_bert_control(c)) continue;
      if (is_white_space(c)) c = ' ';
    }
    if (opt.handle_chinese_chars && is_bert_chinese_char(c)) {
      out += ' ';
      out += c;
      out += ' ';
    } else {
      out += c;
    }
  }
}

}  // namespace

bool is_bert_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  return is_punctuation(c);
}

void bert_normalize(std::u32string_view text, const BertNormalizerOptions& opt,
                    std::u32string& out) {
  out.clear();
  std::u32string cleaned;
  clean_and_pad(text, opt, cleaned);
  const bool strip = opt.strips_accents();
  if (!strip && !opt.lowercase) {
    out = std::move(cleaned);
    return;
  }
  std::u32string decomposed;
  if (strip) append_nfd(cleaned, decomposed);
  const std::u32string& in = strip ? decomposed : cleaned;
  out.reserve(in.size());
  // Marks go before lower-casing (as `tokenizers` orders the steps): a mark that lower-casing
  // makes (U+0130's U+0307) is kept, but U+0130 reaches here decomposed when accents are stripped.
  for (char32_t c : in) {
    if (strip && is_nonspacing_mark(c)) continue;
    if (opt.lowercase)
      append_lowercase(c, out);
    else
      out += c;
  }
}

void bert_pre_tokenize(std::u32string_view text, std::vector<std::u32string_view>& words) {
  size_t start = 0;  // the current word's first character
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool space = is_white_space(c);
    if (!space && !is_bert_punctuation(c)) continue;
    if (i > start) words.push_back(text.substr(start, i - start));
    if (!space) words.push_back(text.substr(i, 1));
    start = i + 1;
  }
  if (start < text.size()) words.push_back(text.substr(start));
}

}  // namespace loom::data
