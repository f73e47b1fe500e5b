// data/bpe_regex: the \s rewrite, and the matching rules of Note [Pre-tokenizer regexes]: pieces
// cover the text, U+180E is not white space, $ is the end of the text only, the long s folds to s,
// invalid UTF-8 bytes are pieces of their own, empty matches are skipped; a bad pattern's error.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bpe_presets.h"
#include "data/bpe_regex.h"

using namespace loom;
using namespace loom::data;

namespace {

std::vector<std::string> pieces(const BpeRegex& re, std::string_view text) {
  std::vector<std::string> out;
  re.for_each_piece(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using Pieces = std::vector<std::string>;

const BpeRegex& cl100k() {
  static const BpeRegex re(bpe_preset_format(BpePreset::kCl100k, 0).pattern, "cl100k");
  return re;
}

}  // namespace

TEST(BpeRegex, WhiteSpaceEscapesAreRewrittenOthersKept) {
  EXPECT_EQ(BpeRegex::to_pcre2(R"(\s+(?!\S))"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_EQ(BpeRegex::to_pcre2(R"([^\s\p{L}\p{N}]+)"), R"([^\p{White_Space}\p{L}\p{N}]+)");
  EXPECT_EQ(BpeRegex::to_pcre2(R"(\\s\d\Q\s\E\s)"), R"(\\s\d\Q\s\E\p{White_Space})");
  EXPECT_EQ(BpeRegex::to_pcre2(R"(a\)"), R"(a\)");
}

TEST(BpeRegex, Cl100kSplitsAsTiktoken) {
  // As Python's regex module's findall splits it (here each piece is also one cl100k token).
  EXPECT_EQ(pieces(cl100k(), "I'M don't  x\n\n1234"),
            (Pieces{"I", "'M", " don", "'t", " ", " x", "\n\n", "123", "4"}));
  EXPECT_EQ(pieces(cl100k(), "it'\xC5\xBF"), (Pieces{"it", "'\xC5\xBF"}));  // 'ſ folds to 's
}

// As tiktoken 0.14 and tokenizers 0.23 split it: Split(Regex(r"\s+|\S+")).pre_tokenize_str gives
// "a", " ", "\u180eb".
TEST(BpeRegex, MongolianVowelSeparatorIsNotWhiteSpace) {
  const BpeRegex re(R"(\s+|\S+)", "test");
  EXPECT_EQ(pieces(re,
                   "a \xE1\xA0\x8E"
                   "b \xE3\x80\x80"
                   "c"),  // U+180E, U+3000
            (Pieces{"a", " ",
                    "\xE1\xA0\x8E"
                    "b",
                    " \xE3\x80\x80", "c"}));
}

TEST(BpeRegex, DollarIsTheEndOfTheTextOnly) {
  const BpeRegex re("a$", "test");
  EXPECT_EQ(pieces(re, "ba\n"), (Pieces{"ba\n"}));  // PCRE2's default would match before \n
  EXPECT_EQ(pieces(re, "ba"), (Pieces{"b", "a"}));
}

TEST(BpeRegex, InvalidUtf8BytesAreUnmatchedPieces) {
  EXPECT_EQ(pieces(cl100k(),
                   "ab\xFF\xFE"
                   "cd \xC3"),
            (Pieces{"ab", "\xFF\xFE", "cd", " ", "\xC3"}));
  EXPECT_EQ(pieces(cl100k(), "\x80"), (Pieces{"\x80"}));
}

TEST(BpeRegex, EmptyMatchesAreSkippedAndGapsArePieces) {
  const BpeRegex re("x*", "test");
  EXPECT_EQ(pieces(re, "abc"), (Pieces{"abc"}));
  EXPECT_EQ(pieces(re, "axxb\xC3\xA9x"), (Pieces{"a", "xx", "b\xC3\xA9", "x"}));
  EXPECT_EQ(pieces(re, ""), (Pieces{}));
}

TEST(BpeRegex, EveryPresetsPiecesCoverAnyText) {
  std::mt19937 rng(3);
  const std::vector<std::string> bits = {"a",
                                         "Z",
                                         " ",
                                         "  ",
                                         "\n",
                                         "\r\n",
                                         "'s",
                                         "7",
                                         "\xC3\xA9",
                                         "\xE6\x97\xA5",
                                         "\xF0\x9F\x98\x80",
                                         "\xFF",
                                         "!",
                                         "\t"};
  for (BpePreset p :
       {BpePreset::kR50k, BpePreset::kCl100k, BpePreset::kO200k, BpePreset::kLlama3}) {
    const BpeRegex re(bpe_preset_format(p, 0).pattern, "preset");
    for (int round = 0; round < 100; ++round) {
      std::string text;
      for (int i = int(rng() % 30); i > 0; --i) text += bits[rng() % bits.size()];
      std::string joined;
      for (const std::string& piece : pieces(re, text)) {
        ASSERT_FALSE(piece.empty());
        joined += piece;
      }
      ASSERT_EQ(joined, text) << bpe_preset_name(p);
    }
  }
}

TEST(BpeRegex, ABadPatternIsAnErrorNamingSourceAndOffset) {
  try {
    BpeRegex re("ab(c", "my.json");
    FAIL() << "expected a loom::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("my.json: the pre-tokenizer regex does not compile (PCRE2: missing closing "
                     "parenthesis, at offset 4 of ab(c)"),
              std::string::npos)
        << m;
  }
}
