// data/unicode_text: UTF-8 decoding with U+FFFD per maximal subpart (Python's and Rust's count),
// encoding back, the categories asked about, NFD with canonical ordering, full lowercase.
#include <gtest/gtest.h>

#include <string>

#include "data/unicode_text.h"

using namespace loom::data;

namespace {

std::u32string decoded(const std::string& s) {
  std::u32string out;
  decode_utf8(s, out);
  return out;
}

std::u32string nfd(std::u32string_view s) {
  std::u32string out;
  append_nfd(s, out);
  return out;
}

std::u32string lower(char32_t c) {
  std::u32string out;
  append_lowercase(c, out);
  return out;
}

}  // namespace

TEST(UnicodeText, DecodeReplacesEachMaximalSubpart) {
  EXPECT_EQ(decoded("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), U"a\u00E9\u20AC\U0001F600");
  // b"...".decode("utf-8", "replace") in Python gives these counts of U+FFFD.
  EXPECT_EQ(decoded("\x80"), U"\uFFFD");
  EXPECT_EQ(decoded("\xE2\x82"
                    "a"),
            U"\uFFFDa");                                      // truncated: one
  EXPECT_EQ(decoded("\xC3"), U"\uFFFD");                      // at the end
  EXPECT_EQ(decoded("\xC0\xAF"), U"\uFFFD\uFFFD");            // overlong: each byte
  EXPECT_EQ(decoded("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // a surrogate
  EXPECT_EQ(decoded("\xF0\x80\x80"), U"\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(decoded("\xF4\x90\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");  // above U+10FFFF
  EXPECT_EQ(decoded("\xF0\x9F\x98"), U"\uFFFD");
  EXPECT_EQ(decoded("\xFF"
                    "b"),
            U"\uFFFDb");
}

TEST(UnicodeText, EncodeRoundTrips) {
  for (char32_t c : {U'\0', U'a', U'\u007F', U'\u0080', U'\u07FF', U'\u0800', U'\uFFFF',
                     U'\U00010000', U'\U0010FFFF'}) {
    std::string s;
    append_utf8(c, s);
    EXPECT_EQ(decoded(s), std::u32string(1, c)) << code_point_name(c);
  }
  EXPECT_EQ(encode_utf8(U"h\u00E9\U0001F600"), "h\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(code_point_name(0xE9), "U+00E9");
  EXPECT_EQ(code_point_name(0x1F600), "U+1F600");
}

TEST(UnicodeText, Categories) {
  for (char32_t c : {U'\t', U'\n', U'\r', U' ', U'\u0085', U'\u00A0', U'\u3000', U'\u2028'})
    EXPECT_TRUE(is_white_space(c)) << code_point_name(c);
  for (char32_t c : {U'a', U'\u180E', U'\u200B', U'\0'}) EXPECT_FALSE(is_white_space(c));
  for (char32_t c : {U'\u0007', U'\u007F', U'\u0085', U'\u200D', U'\uE000', U'\u00AD'})
    EXPECT_TRUE(is_other(c)) << code_point_name(c);
  for (char32_t c : {U'a', U'\u0378', U'\u0301'}) EXPECT_FALSE(is_other(c)) << code_point_name(c);
  for (char32_t c : {U'!', U'\u00BF', U'\u00AB', U'_', U'\u2014', U'\u3002'})
    EXPECT_TRUE(is_punctuation(c)) << code_point_name(c);
  for (char32_t c : {U'$', U'^', U'+', U'a'}) EXPECT_FALSE(is_punctuation(c)) << code_point_name(c);
  EXPECT_TRUE(is_nonspacing_mark(0x301));
  EXPECT_TRUE(is_nonspacing_mark(0xFE0F));   // a variation selector
  EXPECT_FALSE(is_nonspacing_mark(0x903));   // Mc
  EXPECT_FALSE(is_nonspacing_mark(0x20DD));  // Me
  EXPECT_FALSE(std::string(unicode_version()).empty());
}

TEST(UnicodeText, CanonicalDecompositionAndOrder) {
  EXPECT_EQ(nfd(U"\u00E9"), U"e\u0301");
  EXPECT_EQ(nfd(U"\uD55C"), U"\u1112\u1161\u11AB");    // a Hangul syllable: three jamo
  EXPECT_EQ(nfd(U"\u01D6"), U"u\u0308\u0304");         // two levels
  EXPECT_EQ(nfd(U"\u2126"), U"\u03A9");                // a singleton (OHM SIGN)
  EXPECT_EQ(nfd(U"\u00A0\uFB01"), U"\u00A0\uFB01");    // compatibility mappings are not NFD
  EXPECT_EQ(nfd(U"a\u0301\u0323"), U"a\u0323\u0301");  // class 230 after class 220
  EXPECT_EQ(nfd(U"\u1E0B\u0323"), U"d\u0323\u0307");   // decomposed, then reordered
  EXPECT_EQ(nfd(U"a\u0323\u0301b"), U"a\u0323\u0301b");
}

TEST(UnicodeText, FullLowercase) {
  EXPECT_EQ(lower(U'A'), U"a");
  EXPECT_EQ(lower(U'1'), U"1");
  EXPECT_EQ(lower(0x130), U"i\u0307");  // İ: the one two-character lowercase
  EXPECT_EQ(lower(0x3A3), U"\u03C3");   // Σ: never the final ς
  EXPECT_EQ(lower(0x1E9E), U"\u00DF");  // ẞ
  EXPECT_EQ(lower(0x1C4), U"\u01C6");   // Ǆ
  EXPECT_EQ(lower(0x00DF), U"\u00DF");  // ß stays
}

TEST(UnicodeText, CanonicalComposition) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");              // e + acute -> é
  EXPECT_EQ(nfc("a\u0323\u030a"), "\u1ea1\u030a");  // dot below composes first
  EXPECT_EQ(nfc("\u1100\u1161"), "\uac00");         // Hangul jamo -> syllable
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // a singleton: Angstrom sign -> Å
  EXPECT_EQ(nfc("\ufb01"), "\ufb01");               // a compatibility form stays (NFKC's)
  EXPECT_EQ(nfc("plain ASCII\n"), "plain ASCII\n");
  EXPECT_EQ(nfc("bad \xC3 byte e\u0301"), "bad \xC3 byte e\u0301");  // invalid: unchanged
}
