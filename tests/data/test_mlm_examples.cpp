// data/mlm_examples: documents from text and from the KJV's chapters, and Note [Packing lines]:
// chunks within the length, lines whole unless too long, never across documents, every token kept
// in order; pairs split at the line boundary nearest the middle; the fixture tokenizer over the
// KJV excerpt.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/mlm_examples.h"
#include "data/wordpiece.h"

using namespace loom;
using namespace loom::data;

namespace {

constexpr int32_t kCls = 2, kSep = 3;

using Doc = std::vector<std::vector<int32_t>>;

// A line of n tokens numbered from `first`.
std::vector<int32_t> line(int32_t first, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

}  // namespace

TEST(MlmExamples, DocumentsFromBlankLines) {
  const Documents d = documents_from_text("\n  first line \nsecond\n\n \t\nthird\r\nfourth\n\n");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (std::vector<std::string>{"first line", "second"}));
  EXPECT_EQ(d[1], (std::vector<std::string>{"third", "fourth"}));
  EXPECT_TRUE(documents_from_text("\n \n").empty());
}

TEST(MlmExamples, KjvChaptersOfVerses) {
  const Documents d = kjv_chapters(
      "\nGenesis 1\n\n  1 In the beginning.\n  2 And the earth.\n\nGenesis 2\n\n  1 Thus the "
      "heavens.\n");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (std::vector<std::string>{"In the beginning.", "And the earth."}));
  EXPECT_EQ(d[1], (std::vector<std::string>{"Thus the heavens."}));
  try {
    kjv_chapters("Genesis 1\n  x verse\n");
    ADD_FAILURE() << "expected a loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kjv_chapters: line 2 (\"  x verse\") is neither"),
              std::string::npos)
        << e.what();
  }
}

TEST(MlmExamples, SingleSegmentsPackWholeLines) {
  // max_length 10: 8 tokens of room. Lines of 3, 4, 2, 5 | 12 (too long) 1 | (next document) 2.
  const std::vector<Doc> docs = {{line(10, 3), line(20, 4), {}, line(30, 2), line(40, 5)},
                                 {line(50, 12), line(70, 1)},
                                 {line(80, 2)}};
  const std::vector<BertInput> ex = pack_encoded(docs, kCls, kSep, {.max_length = 10});
  std::vector<std::vector<int32_t>> got;
  for (const BertInput& e : ex) {
    EXPECT_LE(e.ids.size(), 10u);
    EXPECT_EQ(e.ids.front(), kCls);
    EXPECT_EQ(e.ids.back(), kSep);
    EXPECT_EQ(e.token_types, std::vector<int32_t>(e.ids.size(), 0));
    got.emplace_back(e.ids.begin() + 1, e.ids.end() - 1);
  }
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::vector<int32_t>> want = {
      cat(line(10, 3), line(20, 4)),  // 7: the 2-token line does not fit
      cat(line(30, 2), line(40, 5)),  // 7
      line(50, 8),                    // the long line's first 8, alone
      cat(line(58, 4), line(70, 1)),  // its last 4, which the next line joins
      line(80, 2)};                   // a new document
  EXPECT_EQ(got, want);
}

TEST(MlmExamples, PairsSplitNearTheMiddle) {
  // max_length 12: 9 tokens of room. Lines 2, 3, 4 (9): A = 2 + 3 (5 is nearest 4.5: 2 is 2.5 off).
  const std::vector<Doc> docs = {{line(10, 2), line(20, 3), line(30, 4)}, {line(40, 7)}};
  const std::vector<BertInput> ex =
      pack_encoded(docs, kCls, kSep, {.max_length = 12, .pairs = true});
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].ids,
            (std::vector<int32_t>{kCls, 10, 11, 20, 21, 22, kSep, 30, 31, 32, 33, kSep}));
  EXPECT_EQ(ex[0].token_types, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  // One line: cut at its middle token, A taking the extra one.
  EXPECT_EQ(ex[1].ids, (std::vector<int32_t>{kCls, 40, 41, 42, 43, kSep, 44, 45, 46, kSep}));
  try {
    pack_encoded(docs, kCls, kSep, {.max_length = 3, .pairs = true});
    ADD_FAILURE() << "expected a loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_length 3 leaves no room"), std::string::npos)
        << e.what();
  }
}

TEST(MlmExamples, TheKjvExcerptWithTheFixtureTokenizer) {
  std::ifstream in(fixture("fixtures.json"));
  ASSERT_TRUE(in.good()) << "no " << fixture("fixtures.json") << " (set LOOM_SOURCE_DIR)";
  const std::string kjv = nlohmann::json::parse(in)["texts"]["kjv"];
  const WordPieceTokenizer tok = WordPieceTokenizer::from_hf_json(fixture("kjv_wordpiece.json"));
  const Documents chapters = kjv_chapters(kjv);
  ASSERT_GE(chapters.size(), 1u);
  size_t tokens = 0;
  for (const auto& chapter : chapters)
    for (const std::string& verse : chapter) tokens += tok.encode(verse).size();
  for (bool pairs : {false, true}) {
    const std::vector<BertInput> ex = pack_documents(tok, chapters, tok.cls_id(), tok.sep_id(),
                                                     {.max_length = 64, .pairs = pairs});
    size_t kept = 0;
    for (const BertInput& e : ex) {
      EXPECT_LE(e.ids.size(), 64u);
      kept += e.ids.size() - (pairs ? 3 : 2);
    }
    EXPECT_EQ(kept, tokens) << "pairs " << pairs;  // every token once
    EXPECT_GT(ex.size(), 8u);
    EXPECT_EQ(tok.decode(ex[0].ids, true).substr(0, 33), "in the beginning god created the ");
  }
}
