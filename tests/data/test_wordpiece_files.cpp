// data/wordpiece_files: every refusal of a tokenizer.json with its field (Note [WordPiece
// tokenizer.json]), BERT's two post-processors and the names they give [CLS] and [SEP], vocab.txt
// lines (trailing whitespace, duplicates, no [UNK]), tokenizer_config.json, missing files, and
// read_hf_model_type.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/hf_tokenizer_json.h"
#include "data/wordpiece.h"
#include "data/wordpiece_files.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::data;
using json = nlohmann::json;
using loom::test::TempDir;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error";
  return "";
}

json bert_json() {
  std::ifstream in(fixture("kjv_wordpiece.json"));
  EXPECT_TRUE(in.good()) << "no " << fixture("kjv_wordpiece.json") << " (set LOOM_SOURCE_DIR)";
  return in.good() ? json::parse(in) : json::object();
}

// The error read_hf_wordpiece_json gives for the fixture changed by `edit`.
template <typename F>
std::string refusal(F edit) {
  TempDir dir;
  json j = bert_json();
  edit(j);
  loom::test::write_bytes(dir.file("tokenizer.json"), j.dump());
  return error_of([&] { read_hf_wordpiece_json(dir.file("tokenizer.json")); });
}

}  // namespace

TEST(WordPieceFiles, TheFixtureReadsAsBertUncased) {
  const WordPieceModel m = read_hf_wordpiece_json(fixture("kjv_wordpiece.json"));
  EXPECT_EQ(m.name, "tokenizer.json");
  EXPECT_EQ(m.vocab.size(), 3000u);
  EXPECT_EQ(m.unk_token, "[UNK]");
  EXPECT_EQ(m.continuing_subword_prefix, "##");
  EXPECT_EQ(m.max_input_chars_per_word, 100);
  ASSERT_TRUE(m.normalizer.has_value());
  EXPECT_TRUE(m.normalizer->lowercase && m.normalizer->strips_accents());
  EXPECT_FALSE(m.normalizer->strip_accents.has_value());
  EXPECT_EQ(m.specials.size(), 5u);
  EXPECT_EQ(m.cls_token, "[CLS]");
  EXPECT_EQ(m.sep_token, "[SEP]");
  EXPECT_TRUE(m.wordpiece_decoder && m.decoder_cleanup);
}

TEST(WordPieceFiles, RefusalsNameTheField) {
  std::string e = refusal([](json& j) { j["model"]["type"] = "BPE"; });
  EXPECT_NE(e.find(": model.type is \"BPE\", not \"WordPiece\""), std::string::npos) << e;
  e = refusal([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; });
  EXPECT_NE(
      e.find(": normalizer {\"type\":\"Lowercase\"} is not supported (BertNormalizer or null)"),
      std::string::npos)
      << e;
  e = refusal([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; });
  EXPECT_NE(e.find(": pre_tokenizer {\"type\":\"Whitespace\"} is not supported"), std::string::npos)
      << e;
  e = refusal([](json& j) { j["pre_tokenizer"] = nullptr; });
  EXPECT_NE(e.find(": pre_tokenizer null is not supported"), std::string::npos) << e;
  e = refusal([](json& j) { j["decoder"] = {{"type", "ByteLevel"}}; });
  EXPECT_NE(e.find(": decoder {\"type\":\"ByteLevel\"} is not supported (WordPiece or null)"),
            std::string::npos)
      << e;
  e = refusal([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; });
  EXPECT_NE(e.find(": post_processor {\"type\":\"RobertaProcessing\"} is not supported"),
            std::string::npos)
      << e;
  e = refusal([](json& j) { j["post_processor"]["pair"][3]["Sequence"]["type_id"] = 0; });
  EXPECT_NE(e.find("is not BERT's template"), std::string::npos) << e;
  e = refusal([](json& j) { j["added_tokens"][2]["lstrip"] = true; });
  EXPECT_NE(e.find(": added_tokens[2] ([CLS]): lstrip true is not supported"), std::string::npos)
      << e;
  e = refusal([](json& j) { j["added_tokens"][4]["normalized"] = true; });
  EXPECT_NE(e.find(": added_tokens[4] ([MASK]): normalized true is not supported"),
            std::string::npos)
      << e;
  e = refusal([](json& j) { j["model"]["vocab"]["the"] = "x"; });
  EXPECT_NE(e.find(": model.vocab[\"the\"] is \"x\", not an id"), std::string::npos) << e;
  e = refusal([](json& j) { j["normalizer"]["lowercase"] = "yes"; });
  EXPECT_NE(e.find("tokenizer.json "), std::string::npos) << e;  // nlohmann's type error, located
  e = refusal([](json& j) { j.erase("model"); });
  EXPECT_NE(e.find(": no \"model\" object"), std::string::npos) << e;
}

TEST(WordPieceFiles, BertProcessingAndOtherTokenNames) {
  TempDir dir;
  json j = bert_json();
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}};
  j["decoder"] = nullptr;
  j["normalizer"] = nullptr;
  loom::test::write_bytes(dir.file("a.json"), j.dump());
  const WordPieceModel a = read_hf_wordpiece_json(dir.file("a.json"));
  EXPECT_EQ(a.cls_token, "[CLS]");
  EXPECT_FALSE(a.wordpiece_decoder);
  EXPECT_FALSE(a.normalizer.has_value());
  const WordPieceTokenizer raw(a);  // no normalizer: "The" is not "the"
  EXPECT_NE(raw.encode("The"), raw.encode("the"));
  // A template whose tokens are called otherwise: encode_pair uses them.
  j = bert_json();
  std::string s = j["post_processor"].dump();
  for (auto [from, to] : {std::pair{"[CLS]", "[MASK]"}, std::pair{"[SEP]", "[PAD]"}})
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from))
      s.replace(at, std::string(from).size(), to);
  j["post_processor"] = json::parse(s);
  j["post_processor"]["special_tokens"]["[MASK]"]["ids"] = {4};
  j["post_processor"]["special_tokens"]["[PAD]"]["ids"] = {0};
  loom::test::write_bytes(dir.file("b.json"), j.dump());
  const WordPieceTokenizer b = WordPieceTokenizer::from_hf_json(dir.file("b.json"));
  const int32_t a_id = b.token_id("a"), b_id = b.token_id("b");
  EXPECT_EQ(b.encode_pair("a", "b").ids,
            (std::vector<int32_t>{4, a_id, 0, b_id, 0}));  // as tokenizers
}

TEST(WordPieceFiles, VocabTxtLines) {
  TempDir dir;
  loom::test::write_bytes(dir.file("vocab.txt"),
                          "[PAD]\n[UNK]\nfoo \nbar\r\n[CLS]\nfoo\n##o\n\n[SEP]\n[MASK]");
  const WordPieceModel m = read_wordpiece_vocab_txt(dir.file("vocab.txt"));
  ASSERT_EQ(m.vocab.size(), 10u);
  EXPECT_EQ(m.vocab[2].first, "foo");  // trailing whitespace is not the token's
  EXPECT_EQ(m.vocab[3].first, "bar");
  EXPECT_EQ(m.vocab[7].first, "");
  EXPECT_EQ(m.vocab[9].first, "[MASK]");  // the last line needs no newline
  EXPECT_EQ(m.specials.size(), 5u);
  const WordPieceTokenizer tok(m);
  EXPECT_EQ(tok.encode("foo bar fooo"), (std::vector<int32_t>{5, 3, 5, 6}));  // "foo": its last id
  EXPECT_EQ(tok.encode("FOO [UNK]", SpecialTokens::allow()), (std::vector<int32_t>{5, 1}));
  BertNormalizerOptions keep_case;
  keep_case.lowercase = false;
  const WordPieceTokenizer cased =
      WordPieceTokenizer::from_vocab_txt(dir.file("vocab.txt"), keep_case);
  EXPECT_EQ(cased.encode("FOO foo"), (std::vector<int32_t>{1, 5}));

  loom::test::write_bytes(dir.file("no_unk.txt"), "[PAD]\na\n");
  std::string e = error_of([&] { read_wordpiece_vocab_txt(dir.file("no_unk.txt")); });
  EXPECT_NE(e.find("vocab.txt " + dir.file("no_unk.txt") + ": has no line \"[UNK]\""),
            std::string::npos)
      << e;
  e = error_of([&] { read_wordpiece_vocab_txt(dir.file("missing.txt")); });
  EXPECT_NE(e.find("vocab.txt " + dir.file("missing.txt") + ": cannot open it"), std::string::npos)
      << e;
  e = error_of([&] { read_hf_wordpiece_json(dir.file("missing.json")); });
  EXPECT_NE(e.find("tokenizer.json " + dir.file("missing.json") + ": cannot open it"),
            std::string::npos)
      << e;
}

TEST(WordPieceFiles, TokenizerConfigBesideTheVocabulary) {
  TempDir dir;
  EXPECT_FALSE(read_tokenizer_config(dir.file("vocab.txt")).has_value());
  loom::test::write_bytes(dir.file("tokenizer_config.json"),
                          R"({"do_lower_case": false, "strip_accents": true,
                              "tokenize_chinese_chars": false, "model_max_length": 512})");
  const std::optional<BertNormalizerOptions> o = read_tokenizer_config(dir.file("vocab.txt"));
  ASSERT_TRUE(o.has_value());
  EXPECT_FALSE(o->lowercase);
  EXPECT_EQ(o->strip_accents, true);
  EXPECT_FALSE(o->handle_chinese_chars);
  EXPECT_TRUE(o->clean_text);
}

TEST(WordPieceFiles, ModelTypeWithoutReadingTheWholeFile) {
  EXPECT_EQ(read_hf_model_type(fixture("kjv_wordpiece.json")), "WordPiece");
  EXPECT_EQ(read_hf_model_type(fixture("kjv_bpe.json")), "BPE");
  TempDir dir;
  // "type" elsewhere (a normalizer's, a vocabulary token's) is not the model's.
  loom::test::write_bytes(dir.file("a.json"),
                          R"({"normalizer": {"type": "X"}, "model": {"vocab": {"type": 3},
                              "merges": [], "x": [{"type": "Y"}]}})");
  EXPECT_EQ(read_hf_model_type(dir.file("a.json")), "");
  loom::test::write_bytes(dir.file("b.json"), R"({"model": {"type": "Unigram", "vocab": [)");
  EXPECT_EQ(read_hf_model_type(dir.file("b.json")), "Unigram");  // found before the broken part
  loom::test::write_bytes(dir.file("c.json"), R"({"model": {"vocab": [)");
  std::string e = error_of([&] { read_hf_model_type(dir.file("c.json")); });
  EXPECT_NE(e.find("tokenizer.json " + dir.file("c.json") + ": not valid JSON"), std::string::npos)
      << e;
  loom::test::write_bytes(dir.file("d.json"), R"({"decoder": null})");
  e = error_of([&] { read_hf_model_type(dir.file("d.json")); });
  EXPECT_NE(e.find(": no \"model\" object"), std::string::npos) << e;
}
