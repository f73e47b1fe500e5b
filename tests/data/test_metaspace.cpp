// data/metaspace: steps 1 to 3 of Note [SentencePiece BPE] (spaces to marks, the mark in front as
// each prepend scheme says, words cut before each mark) and the two readers of text it needs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/metaspace.h"

using namespace loom::data;

namespace {

const std::string kMark = "\u2581";

std::string normalized(Metaspace::Prepend prepend, std::string_view text, bool at_start) {
  Metaspace m;
  m.prepend = prepend;
  std::string out;
  m.normalize(text, at_start, out);
  return out;
}

std::vector<std::string> words(std::string_view normalized, bool split) {
  Metaspace m;
  m.split = split;
  std::vector<std::string> out;
  m.for_each_word(normalized, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

}  // namespace

TEST(Metaspace, EachPrependScheme) {
  using P = Metaspace::Prepend;
  const std::string m = kMark;
  EXPECT_EQ(normalized(P::kEvery, "a b", false), m + "a" + m + "b");
  EXPECT_EQ(normalized(P::kEvery, " a", true), m + m + "a");  // Prepend puts one in any case
  EXPECT_EQ(normalized(P::kAlways, " a", true), m + "a");     // already starts with a mark
  EXPECT_EQ(normalized(P::kAlways, "a", false), m + "a");
  EXPECT_EQ(normalized(P::kFirst, "a", true), m + "a");
  EXPECT_EQ(normalized(P::kFirst, "a", false), "a");  // after a special token
  EXPECT_EQ(normalized(P::kNever, "a  b", true), "a" + m + m + "b");
  EXPECT_EQ(normalized(P::kEvery, "", true), "");
  EXPECT_EQ(normalized(P::kEvery, "a\tb\u00a0c", true), m + "a\tb\u00a0c");  // spaces only
}

TEST(Metaspace, SplitKeepsEachMarkWithTheWordAfterIt) {
  const std::string m = kMark;
  EXPECT_EQ(words(m + "a" + m + m + "bc" + m, true),
            (std::vector<std::string>{m + "a", m, m + "bc", m}));
  EXPECT_EQ(words("ab" + m + "c", true), (std::vector<std::string>{"ab", m + "c"}));
  EXPECT_EQ(words(m + "a" + m + "b", false), (std::vector<std::string>{m + "a" + m + "b"}));
  EXPECT_TRUE(words("", false).empty());
  EXPECT_TRUE(words("", true).empty());
}

TEST(Metaspace, RunsCutBeforeAMarkAfterAnotherCharacter) {
  const std::string m = kMark;
  std::vector<std::string> out;
  Metaspace ms;
  ms.for_each_run(m + "a" + m + m + "bc" + m + "d" + m,
                  [&](std::string_view w) { out.emplace_back(w); });
  EXPECT_EQ(out, (std::vector<std::string>{m + "a", m + m + "bc", m + "d", m}));
  EXPECT_TRUE(ms.joins_before_mark("a" + m));
  EXPECT_TRUE(ms.joins_before_mark(m + m + "x" + m));
  EXPECT_FALSE(ms.joins_before_mark(m + m + m + "x"));
  EXPECT_FALSE(ms.joins_before_mark(m));
}

TEST(Metaspace, FallbackBytesAndCharacterLengths) {
  EXPECT_EQ(Metaspace::fallback_byte("<0x0A>"), 10);
  EXPECT_EQ(Metaspace::fallback_byte("<0xFF>"), 255);
  EXPECT_EQ(Metaspace::fallback_byte("<0xff>"), -1);  // tokenizers writes upper case
  EXPECT_EQ(Metaspace::fallback_byte("<0x0A"), -1);
  EXPECT_EQ(Metaspace::fallback_byte("a"), -1);
  const std::string s =
      "a\u00e9\u6f22\U0001F600\xC3"
      "b\xE6\xBC";
  EXPECT_EQ(Metaspace::char_length(s, 0), 1u);
  EXPECT_EQ(Metaspace::char_length(s, 1), 2u);
  EXPECT_EQ(Metaspace::char_length(s, 3), 3u);
  EXPECT_EQ(Metaspace::char_length(s, 6), 4u);
  EXPECT_EQ(Metaspace::char_length(s, 10), 1u);  // 0xC3 before "b": not a continuation
  EXPECT_EQ(Metaspace::char_length(s, 12), 1u);  // a cut 3-byte character at the end
}
