// data/wordpiece_normalizer: each step of Note [BERT normalization] and each option, on inputs
// whose outputs `tokenizers`' BertNormalizer gave (tokenizers 0.23); BertPreTokenizer's words,
// ASCII symbols as punctuation; the ideograph blocks' bounds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/unicode_text.h"
#include "data/wordpiece_normalizer.h"

using namespace loom::data;

namespace {

// bert_normalize of UTF-8 text, as UTF-8.
std::string normalized(const std::string& text, const BertNormalizerOptions& o = {}) {
  std::u32string in, out;
  decode_utf8(text, in);
  bert_normalize(in, o, out);
  return encode_utf8(out);
}

std::vector<std::string> words(const std::string& text) {
  std::u32string in;
  decode_utf8(text, in);
  std::vector<std::u32string_view> w;
  bert_pre_tokenize(in, w);
  std::vector<std::string> out;
  for (std::u32string_view v : w) out.push_back(encode_utf8(v));
  return out;
}

}  // namespace

TEST(BertNormalizer, CleanTextDropsControlsAndMapsWhitespace) {
  // NUL, U+FFFD, ZWJ (Cf), U+0085 and U+000B (Cc), private use dropped; tab, U+3000, U+2028 spaces.
  using namespace std::string_literals;  // the text holds a NUL
  EXPECT_EQ(normalized("a\0b\xEF\xBF\xBD c\u200Dd\te\u0085f\u3000g\vh\u2028i\uE000j"s),
            "ab cd ef gh ij");
  EXPECT_EQ(normalized("a\u0378b"), "a\u0378b");  // unassigned (Cn) is kept
}

TEST(BertNormalizer, ChineseCharactersPadded) {
  EXPECT_EQ(normalized("ab漢字cd 𠀋"), "ab 漢  字 cd  𠀋 ");
  EXPECT_EQ(normalized("かな한"), "かな\u1112\u1161\u11AB");  // not padded; Hangul as NFD jamo
  EXPECT_TRUE(is_bert_chinese_char(0x4E00) && is_bert_chinese_char(0x9FFF));
  EXPECT_TRUE(is_bert_chinese_char(0x2B920) && is_bert_chinese_char(0x2CEAF));
  EXPECT_FALSE(is_bert_chinese_char(0x2B820));  // `tokenizers`' bound is U+2B920
  EXPECT_FALSE(is_bert_chinese_char(0x30000));  // Extension G is not in the list
  EXPECT_FALSE(is_bert_chinese_char(0xA000));
}

TEST(BertNormalizer, AccentsAndCaseAsEachOptionSays) {
  const std::string text = "Ångström ÉCOLE İ ΣΑΣ";
  EXPECT_EQ(normalized(text + " ẞ Ǆ"), "angstrom ecole i σασ ß ǆ");  // uncased: both
  BertNormalizerOptions o;
  o.strip_accents = false;  // lower-case only: İ has a two-character lowercase
  EXPECT_EQ(normalized(text, o), "ångström école i\u0307 σασ");
  o = {}, o.lowercase = false, o.strip_accents = true;
  EXPECT_EQ(normalized("Ångström ÉCOLE İ", o), "Angstrom ECOLE I");
  o = {}, o.lowercase = false;  // cased: strip_accents null follows lowercase
  EXPECT_EQ(normalized(text, o), text);
  EXPECT_EQ(normalized("e\u0301"), "e");  // decomposed input too
  o = {false, false, false, false};
  using namespace std::string_literals;
  const std::string raw = "a\0b\t漢É"s;
  EXPECT_EQ(normalized(raw, o), raw);  // every step off
}

TEST(BertPreTokenizer, WhitespaceSplitsPunctuationIsolates) {
  EXPECT_EQ(words("Hello,world! $5 a+b^c`d ¿qué? «x» a_b 3.14 don't"),
            (std::vector<std::string>{"Hello", ",", "world", "!", "$",   "5",   "a", "+", "b", "^",
                                      "c",     "`", "d",     "¿", "qué", "?",   "«", "x", "»", "a",
                                      "_",     "b", "3",     ".", "14",  "don", "'", "t"}));
  EXPECT_EQ(words("  a\u3000b\u00a0c\u0085d  "), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(words("x—y§z¶w"), (std::vector<std::string>{"x", "—", "y", "§", "z", "¶", "w"}));
  EXPECT_EQ(words(""), std::vector<std::string>{});
  for (char32_t c : {U'!', U'/', U':', U'@', U'[', U'`', U'{', U'~'})
    EXPECT_TRUE(is_bert_punctuation(c));
  for (char32_t c : {U'a', U'0', U' ', U'\u00a9', U'\u20ac'}) EXPECT_FALSE(is_bert_punctuation(c));
}
