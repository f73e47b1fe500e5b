// data/wordpiece against Hugging Face `tokenizers` (Note [WordPiece fixtures]): the ids it gave for
// the KJV excerpt, the Unicode stress text and a BERT-flavoured text, through both loaders and four
// normalizer settings; sentence pairs and truncation with their token types; decoded strings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/wordpiece.h"
#include "data/wordpiece_files.h"
#include "support/tokenizer_fixtures.h"

using namespace loom::data;
using json = nlohmann::json;

// Note [WordPiece fixtures]
// tests/data/tokenizers/ holds what scripts/make-wordpiece-fixtures.py wrote (tokenizers 0.23):
// kjv_wordpiece.json (uncased, 3000 tokens) and kjv_wordpiece_cased.json (2000), trained by
// `tokenizers`' WordPieceTrainer on the KJV text and the test texts (so that CJK, Hangul, Arabic,
// emoji... have tokens; the KJV is ASCII), the uncased vocabulary again as kjv_wordpiece_vocab.txt,
// and wordpiece_fixtures.json: the texts (fixtures.json's KJV excerpt and stress text, and "bert":
// accents, İ, final sigma, Hangul, every ASCII punctuation character, controls, special tokens
// inside text, words of 100 and 101 characters); per suite the file, normalizer options set over
// the file's (`tokenizers` ran with the same) and each text's ids from encode(text,
// add_special_tokens=False) (added tokens split out: SpecialTokens::allow()); pairs and single
// texts through BERT's post-processor with longest-first truncation; decode with and without
// special tokens.

namespace {

// The suite's tokenizer: its file, with the suite's normalizer options over the file's.
WordPieceTokenizer suite_tokenizer(const json& suite) {
  const std::string file = loom::test::tokenizer_fixture() + suite["file"].get<std::string>();
  if (file.ends_with(".txt")) return WordPieceTokenizer::from_vocab_txt(file);
  WordPieceModel m = read_hf_wordpiece_json(file);
  if (suite.contains("options")) {
    BertNormalizerOptions& o = *m.normalizer;
    const json& opt = suite["options"];
    o.clean_text = opt.value("clean_text", o.clean_text);
    o.handle_chinese_chars = opt.value("handle_chinese_chars", o.handle_chinese_chars);
    o.lowercase = opt.value("lowercase", o.lowercase);
    if (opt.contains("strip_accents")) o.strip_accents = opt["strip_accents"].get<bool>();
  }
  return WordPieceTokenizer(std::move(m));
}

// Where two id lists first differ, with the ids around it, or "" when they are equal.
std::string difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::string s = "first difference at index " + std::to_string(i) + " of " +
                  std::to_string(got.size()) + " (want " + std::to_string(want.size()) + "):";
  for (size_t k = i; k < i + 6 && k < got.size(); ++k) s += " got " + std::to_string(got[k]);
  for (size_t k = i; k < i + 6 && k < want.size(); ++k) s += " want " + std::to_string(want[k]);
  return s;
}

}  // namespace

TEST(WordPieceInterop, IdsEqualTokenizersForEverySuiteAndText) {
  const json fx = loom::test::read_tokenizer_fixtures("wordpiece_fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  int checked = 0;
  for (const json& suite : fx["suites"]) {
    SCOPED_TRACE(suite["name"].get<std::string>() + " (" + suite["made_by"].get<std::string>() +
                 ")");
    const WordPieceTokenizer tok = suite_tokenizer(suite);
    for (const auto& [name, want] : suite["ids"].items()) {
      const std::string text = fx["texts"][name];
      EXPECT_EQ(difference(tok.encode(text, SpecialTokens::allow()), want), "") << "text " << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 3);  // 6 suites (2 files, vocab.txt, 3 normalizer settings), 3 texts
}

TEST(WordPieceInterop, LoadTokenizerReadsBothFilesAsWordPiece) {
  const json fx = loom::test::read_tokenizer_fixtures("wordpiece_fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  const std::vector<int32_t> want = fx["suites"][0]["ids"]["kjv"];
  for (const char* file : {"kjv_wordpiece.json", "kjv_wordpiece_vocab.txt"}) {
    SCOPED_TRACE(file);
    std::unique_ptr<Tokenizer> tok = load_tokenizer(loom::test::tokenizer_fixture() + file);
    ASSERT_NE(dynamic_cast<WordPieceTokenizer*>(tok.get()), nullptr);
    EXPECT_EQ(difference(tok->encode(fx["texts"]["kjv"].get<std::string>()), want), "");
    EXPECT_EQ(tok->vocab_size(), 3000);
    EXPECT_EQ(tok->token_id("[MASK]"), 4);
  }
}

TEST(WordPieceInterop, PairsAndTruncationWithTokenTypes) {
  const json fx = loom::test::read_tokenizer_fixtures("wordpiece_fixtures.json");
  ASSERT_TRUE(fx.contains("pairs"));
  const WordPieceTokenizer tok =
      WordPieceTokenizer::from_hf_json(loom::test::tokenizer_fixture() + "kjv_wordpiece.json");
  int pairs = 0;
  for (const json& p : fx["pairs"]) {
    const int64_t max_length = p["max_length"];
    SCOPED_TRACE("max_length " + std::to_string(max_length) + ", a: " + p["a"].get<std::string>());
    const BertInput got =
        p["b"].is_null()
            ? tok.encode_single(p["a"].get<std::string>(), max_length)
            : tok.encode_pair(p["a"].get<std::string>(), p["b"].get<std::string>(), max_length);
    EXPECT_EQ(difference(got.ids, p["ids"]), "");
    EXPECT_EQ(got.token_types, p["type_ids"].get<std::vector<int32_t>>());
    pairs += !p["b"].is_null();
  }
  EXPECT_EQ(pairs, 9);
}

TEST(WordPieceInterop, DecodeAsTheWordPieceDecoder) {
  const json fx = loom::test::read_tokenizer_fixtures("wordpiece_fixtures.json");
  ASSERT_TRUE(fx.contains("decode"));
  const WordPieceTokenizer tok =
      WordPieceTokenizer::from_hf_json(loom::test::tokenizer_fixture() + "kjv_wordpiece.json");
  for (const json& d : fx["decode"]) {
    const std::vector<int32_t> ids =
        d.contains("ids") ? d["ids"].get<std::vector<int32_t>>()
                          : tok.encode(fx["texts"][d["text"].get<std::string>()].get<std::string>(),
                                       SpecialTokens::allow());
    SCOPED_TRACE(d.contains("text") ? d["text"].get<std::string>() : "pair");
    EXPECT_EQ(tok.decode(ids), d["with_specials"].get<std::string>());
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), d["without_specials"].get<std::string>());
  }
}
