// data/bpe_tokenizer with a SentencePiece BPE (Note [SentencePiece BPE] in data/metaspace.h):
// against Hugging Face `tokenizers` on the files scripts/make-sentencepiece-fixtures.py wrote
// (Llama 2's layout, the newer Metaspace one, <unk> fused and not): the ids of the KJV excerpt, the
// Unicode stress text and short texts around special tokens, their decode, and the post-processor's
// template; then each rule on a vocabulary small enough to follow by hand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "support/errors.h"
#include "support/tokenizer_fixtures.h"

using namespace loom;
using namespace loom::data;
using json = nlohmann::json;

namespace {

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace

TEST(BpeTokenizerMetaspace, IdsEqualHuggingFaceTokenizers) {
  const json fx = loom::test::read_tokenizer_fixtures("sentencepiece_fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  ASSERT_EQ(fx["suites"].size(), 4u);
  for (const json& suite : fx["suites"]) {
    SCOPED_TRACE(suite["file"].get<std::string>());
    const BpeTokenizer tok = BpeTokenizer::from_hf_json(loom::test::tokenizer_fixture() +
                                                        suite["file"].get<std::string>());
    for (const auto& [name, want] : suite["ids"].items()) {
      SCOPED_TRACE(name);
      const std::string text = fx["texts"][name];
      EXPECT_EQ(tok.encode(text, SpecialTokens::allow()), ids_of(want));
    }
  }
}

TEST(BpeTokenizerMetaspace, DecodeEqualsHuggingFaceTokenizers) {
  const json fx = loom::test::read_tokenizer_fixtures("sentencepiece_fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  for (const json& suite : fx["suites"]) {
    SCOPED_TRACE(suite["file"].get<std::string>());
    const BpeTokenizer tok = BpeTokenizer::from_hf_json(loom::test::tokenizer_fixture() +
                                                        suite["file"].get<std::string>());
    for (const auto& [name, ids] : suite["ids"].items()) {
      SCOPED_TRACE(name);
      EXPECT_EQ(tok.decode(ids_of(ids)), suite["decoded"][name].get<std::string>());
    }
  }
}

TEST(BpeTokenizerMetaspace, PostProcessEqualsEncodeWithSpecialTokens) {
  const json fx = loom::test::read_tokenizer_fixtures("sentencepiece_fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  for (const json& suite : fx["suites"]) {
    SCOPED_TRACE(suite["file"].get<std::string>());
    const auto tok =
        load_tokenizer(loom::test::tokenizer_fixture() + suite["file"].get<std::string>());
    for (const auto& [name, want] : suite["with_template"].items()) {
      SCOPED_TRACE(name);
      const std::string text = fx["texts"][name];
      EXPECT_EQ(tok->post_process(tok->encode(text, SpecialTokens::allow())), ids_of(want));
    }
  }
}

namespace {

// A SentencePiece vocabulary to follow by hand: <unk> <s> </s>, the byte tokens of 'a' and 0xC3
// 0xA9 ("é"), then ▁ a b ▁a ab ▁ab; merges ▁ a -> ▁a, a b -> ab, ▁a b -> ▁ab.
BpeModel small_model(Metaspace ms) {
  BpeModel m;
  m.name = "small", m.source = "test";
  m.tokens = {"<unk>",  "<s>", "</s>", "<0x61>",  "<0xC3>", "<0xA9>",
              "\u2581", "a",   "b",    "\u2581a", "ab",     "\u2581ab"};
  m.merges = {{6, 7, 9}, {7, 8, 10}, {9, 8, 11}};
  m.whole_piece_first = false;
  m.specials = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  ms.unk = 0;
  m.metaspace = ms;
  return m;
}

Metaspace llama2() { return {.byte_fallback = true, .fuse_unk = true}; }

std::vector<int32_t> encode(const BpeModel& m, const std::string& text) {
  return BpeTokenizer(m).encode(text, SpecialTokens::allow());
}

}  // namespace

TEST(BpeTokenizerMetaspace, SpacesBecomeMarksAndWordsMerge) {
  const BpeModel m = small_model(llama2());
  EXPECT_EQ(encode(m, "ab ab"), (std::vector<int32_t>{11, 11}));  // ▁ab ▁ab
  EXPECT_EQ(encode(m, " ab"), (std::vector<int32_t>{6, 11}));     // ▁ ▁ab: Prepend always
  EXPECT_EQ(encode(m, "<s>ab"), (std::vector<int32_t>{1, 11}));   // <s> ▁ab: every stretch
  EXPECT_EQ(encode(m, "ba"), (std::vector<int32_t>{6, 8, 7}));    // ▁ b a: no merge ▁ b
  EXPECT_EQ(encode(m, ""), (std::vector<int32_t>{}));
}

TEST(BpeTokenizerMetaspace, PrependSchemes) {
  Metaspace ms = llama2();
  ms.prepend = Metaspace::Prepend::kFirst;
  EXPECT_EQ(encode(small_model(ms), "<s>ab"), (std::vector<int32_t>{1, 10}));  // <s> ab
  EXPECT_EQ(encode(small_model(ms), "ab<s>"), (std::vector<int32_t>{11, 1}));  // ▁ab <s>
  EXPECT_EQ(encode(small_model(ms), " ab"), (std::vector<int32_t>{11}));       // already ▁
  ms.prepend = Metaspace::Prepend::kAlways;
  EXPECT_EQ(encode(small_model(ms), "<s>ab"), (std::vector<int32_t>{1, 11}));
  ms.prepend = Metaspace::Prepend::kNever;
  EXPECT_EQ(encode(small_model(ms), "ab ab"), (std::vector<int32_t>{10, 11}));
}

TEST(BpeTokenizerMetaspace, ByteFallbackAndUnknownCharacters) {
  const BpeModel m = small_model(llama2());
  // "é" has no token: its two bytes' tokens. "x" has none and its byte none: <unk>, and the run
  // "xx" one <unk> (fuse_unk).
  EXPECT_EQ(encode(m, "\xC3\xA9"), (std::vector<int32_t>{6, 4, 5}));
  EXPECT_EQ(encode(m, "axxb"), (std::vector<int32_t>{9, 0, 8}));
  Metaspace ms = llama2();
  ms.fuse_unk = false;
  EXPECT_EQ(encode(small_model(ms), "axxb"), (std::vector<int32_t>{9, 0, 0, 8}));
  ms.byte_fallback = false;
  EXPECT_EQ(encode(small_model(ms), "\xC3\xA9"), (std::vector<int32_t>{6, 0}));
  // An invalid byte is a character of its own, here one with a byte token: 0xC3 alone.
  EXPECT_EQ(encode(m, "a\xC3"), (std::vector<int32_t>{9, 4}));
  BpeModel no_unk = small_model(ms);
  no_unk.metaspace->unk = -1;
  const std::string e = test::error_of([&] { encode(no_unk, "ax"); });
  EXPECT_NE(e.find("small (test): the character \"x\" at byte 4 of \"\u2581ax\" has no token"),
            std::string::npos)
      << e;
}

TEST(BpeTokenizerMetaspace, SplitCutsBeforeEachMark) {
  Metaspace ms = llama2();
  ms.split = true;
  // Words ▁a, ▁, ▁ab: the lone ▁ cannot merge with the next word's a.
  EXPECT_EQ(encode(small_model(ms), "a  ab"), (std::vector<int32_t>{9, 6, 11}));
  ms.split = false;  // one word: ▁ a -> ▁a wins over a b -> ab (rank 0 before 1)
  EXPECT_EQ(encode(small_model(ms), "a  ab"), (std::vector<int32_t>{9, 6, 11}));
}

// An unsplit stretch is cut before each mark that follows another character, unless some token
// joins a character to a mark: here "a▁", whose merge crosses the cut.
TEST(BpeTokenizerMetaspace, CutsBeforeMarksOnlyWhereNoMergeCrosses) {
  BpeModel runs = small_model(llama2());
  runs.tokens.push_back("\u2581\u2581");  // 12: a run of two marks
  runs.merges.push_back({6, 6, 12});
  EXPECT_EQ(encode(runs, "a  b"), (std::vector<int32_t>{9, 12, 8}));  // ▁a ▁▁ b
  BpeModel joins = small_model(llama2());
  joins.tokens.push_back("a\u2581");                                   // 12
  joins.merges.insert(joins.merges.begin(), {7, 6, 12});               // a ▁ -> a▁ first
  EXPECT_EQ(encode(joins, "aa b"), (std::vector<int32_t>{9, 12, 8}));  // ▁a a▁ b
}

TEST(BpeTokenizerMetaspace, DecodeTurnsMarksIntoSpacesAndBytesBack) {
  BpeTokenizer tok(small_model(llama2()));
  const std::vector<int32_t> ids = {9, 6, 11, 4, 5, 3};  // ▁a ▁ ▁ab <0xC3> <0xA9> <0x61>
  EXPECT_EQ(tok.decode(ids),
            "a  ab\xC3\xA9"
            "a");                                              // the leading space stripped
  EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 9}), "<s> a");  // a special first: none stripped
  Metaspace ms = llama2();
  ms.strip_leading = 0, ms.decode_byte_fallback = false;
  EXPECT_EQ(BpeTokenizer(small_model(ms)).decode(ids), " a  ab<0xC3><0xA9><0x61>");
  ms.strip_leading = 0, ms.first_token_unmarked = true;  // Metaspace's decoder
  EXPECT_EQ(BpeTokenizer(small_model(ms)).decode(std::vector<int32_t>{6, 9, 6}), " a ");
  const std::string e = test::error_of([&] { tok.decode(std::vector<int32_t>{9, 12}); });
  EXPECT_NE(e.find("cannot decode id 12 at position 1"), std::string::npos) << e;
}

TEST(BpeTokenizerMetaspace, PostProcessTemplateAndItsRefusal) {
  BpeModel m = small_model(llama2());
  m.single.before = {1};
  m.single.after = {2};
  EXPECT_EQ(BpeTokenizer(m).post_process({9}), (std::vector<int32_t>{1, 9, 2}));
  m.single.unsupported = "{\"type\":\"Custom\"}";
  const std::string e = test::error_of([&] { BpeTokenizer(m).post_process({9}); });
  EXPECT_NE(e.find("small (test): its post_processor {\"type\":\"Custom\"} is not supported"),
            std::string::npos)
      << e;
}
