// data/hf_tokenizer_json with SentencePiece BPE files (Note [SentencePiece BPE] in
// data/metaspace.h): what the committed files read as, the post-processors read into a template,
// and each refusal naming the file and the part.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/hf_tokenizer_json.h"
#include "support/errors.h"
#include "support/temp_files.h"
#include "support/tokenizer_fixtures.h"

using namespace loom;
using namespace loom::data;
using json = nlohmann::json;
using loom::test::TempDir;
using P = Metaspace::Prepend;

namespace {

// Llama 2's layout, small: <unk> <s> </s>, ▁, a, ▁a.
json small_llama2() {
  auto added = [](int id, const char* text) {
    return json{{"id", id}, {"content", text}, {"normalized", false}, {"special", true}};
  };
  return {
      {"added_tokens", {added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\u2581"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3}, {"a", 4}, {"\u2581a", 5}}},
        {"merges", json::array({json::array({"\u2581", "a"})})}}}};
}

BpeModel read(const TempDir& dir, const json& j) {
  const std::string path = dir.file("tokenizer.json");
  loom::test::write_bytes(path, j.dump());
  return read_hf_tokenizer_json(path);
}

json metaspace_pre(const char* scheme) {
  return {{"type", "Metaspace"},
          {"replacement", "\u2581"},
          {"prepend_scheme", scheme},
          {"split", false}};
}

}  // namespace

TEST(HfTokenizerJsonSentencePiece, TheCommittedFilesReadAsTheirSettingsSay) {
  const BpeModel l2 = read_hf_tokenizer_json(loom::test::tokenizer_fixture("llama2_style.json"));
  ASSERT_TRUE(l2.metaspace.has_value());
  EXPECT_TRUE(l2.pattern.empty());
  EXPECT_EQ(l2.tokens[3], "<0x00>");
  EXPECT_EQ(l2.tokens[259 + 0].substr(0, 1), l2.tokens[259].substr(0, 1));  // text, not bytes
  const Metaspace& a = *l2.metaspace;
  EXPECT_EQ(a.prepend, P::kEvery);
  EXPECT_FALSE(a.split);
  EXPECT_TRUE(a.byte_fallback && a.fuse_unk && a.decode_replacement && a.decode_byte_fallback);
  EXPECT_EQ(a.unk, 0);
  EXPECT_EQ(a.strip_leading, 1);
  EXPECT_EQ(l2.single.before, (std::vector<int32_t>{1}));
  EXPECT_TRUE(l2.single.after.empty());
  const BpeModel meta =
      read_hf_tokenizer_json(loom::test::tokenizer_fixture("metaspace_style.json"));
  EXPECT_EQ(meta.metaspace->prepend, P::kFirst);
  EXPECT_EQ(meta.single.after, (std::vector<int32_t>{2}));
  const BpeModel unk = read_hf_tokenizer_json(loom::test::tokenizer_fixture("metaspace_unk.json"));
  EXPECT_EQ(unk.metaspace->prepend, P::kAlways);
  EXPECT_TRUE(unk.metaspace->split && unk.metaspace->first_token_unmarked);
  EXPECT_FALSE(unk.metaspace->byte_fallback || unk.metaspace->decode_byte_fallback);
  EXPECT_EQ(unk.metaspace->strip_leading, 0);
  const BpeModel never =
      read_hf_tokenizer_json(loom::test::tokenizer_fixture("metaspace_unk_never.json"));
  EXPECT_EQ(never.metaspace->prepend, P::kNever);
  EXPECT_FALSE(never.metaspace->fuse_unk || never.metaspace->first_token_unmarked);
  EXPECT_FALSE(
      read_hf_tokenizer_json(loom::test::tokenizer_fixture("kjv_bpe.json")).metaspace.has_value());
}

TEST(HfTokenizerJsonSentencePiece, PostProcessorsReadIntoATemplate) {
  TempDir dir;
  json j = small_llama2();
  j["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 1}}};
  BpeModel m = read(dir, j);
  EXPECT_EQ(m.single.before, (std::vector<int32_t>{1}));
  EXPECT_EQ(m.single.after, (std::vector<int32_t>{2}));
  // Llama 3's: a Sequence of ByteLevel (offsets only) and a template "<s> $A <s> </s>".
  json special = {{"id", "<s>"}, {"type_id", 0}};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", special}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
           {{"SpecialToken", special}},
           {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
         {"special_tokens",
          {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}, {"</s>", {{"id", "</s>"}, {"ids", {2}}}}}}}}}};
  m = read(dir, j);
  EXPECT_EQ(m.single.before, (std::vector<int32_t>{1}));
  EXPECT_EQ(m.single.after, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(m.single.unsupported.empty());
  j["post_processor"] = {{"type", "Custom"}};  // read, refused only when post_process runs
  EXPECT_EQ(read(dir, j).single.unsupported, "{\"type\":\"Custom\"}");
}

namespace {

struct Refusal {
  std::function<void(json&)> change;
  std::string message;
};

std::vector<Refusal> refusals() {
  return {
      {[](json& j) {
         j["normalizer"]["normalizers"][0] = {{"type", "Lowercase"}};
       },
       ": normalizer step {\"type\":\"Lowercase\"} is not supported"},
      {[](json& j) { j["normalizer"]["normalizers"].erase(1); },
       " does not replace spaces with \"\u2581\" and there is no pre-tokenizer"},
      {[](json& j) { j["pre_tokenizer"] = metaspace_pre("first"); },
       " beside a Metaspace pre-tokenizer is not supported"},
      {[](json& j) {
         j["normalizer"] = nullptr;
         j["pre_tokenizer"] = metaspace_pre("sometimes");
       },
       ": pre_tokenizer.prepend_scheme \"sometimes\" is not always, first or never"},
      {[](json& j) { j["model"]["unk_token"] = "<oov>"; },
       ": model.unk_token \"<oov>\" is not in model.vocab"},
      {[](json& j) { j["decoder"]["decoders"][3]["stop"] = 1; },
       ": decoder step {\"content\":\" \",\"start\":1,\"stop\":1,\"type\":\"Strip\"} is not "
       "supported"},
      {[](json& j) { j["added_tokens"][1]["normalized"] = true; },
       ": added_tokens[1] (<s>): normalized true beside a normalizer is not supported"},
      {[](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<bos>"}}}}}},
                                {"special_tokens", json::object()}};
       },
       ": post_processor.special_tokens has no \"<bos>\""},
  };
}

}  // namespace

TEST(HfTokenizerJsonSentencePiece, EachRefusalNamesTheFileAndThePart) {
  TempDir dir;
  const std::string f = dir.file("tokenizer.json");
  const std::vector<Refusal> cases = refusals();
  for (size_t i = 0; i < cases.size(); ++i) {
    json j = small_llama2();
    cases[i].change(j);
    const std::string e = test::error_of([&] { read(dir, j); });
    EXPECT_NE(e.find("tokenizer.json " + f), std::string::npos) << "case " << i << ": " << e;
    EXPECT_NE(e.find(cases[i].message), std::string::npos)
        << "case " << i << "\nwant: " << cases[i].message << "\ngot:  " << e;
  }
  EXPECT_NO_THROW(read(dir, small_llama2()));
}
