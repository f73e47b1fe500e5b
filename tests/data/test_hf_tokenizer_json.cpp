// data/hf_tokenizer_json: GPT-2's byte-to-character map, what the committed tokenizer.json files
// read as, merges written either way, and each refusal of Note [tokenizer.json support] naming
// the file and the field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/bpe_presets.h"
#include "data/hf_tokenizer_json.h"
#include "support/errors.h"
#include "support/temp_files.h"
#include "support/tokenizer_fixtures.h"

using namespace loom;
using namespace loom::data;
using json = nlohmann::json;
using loom::test::TempDir;

namespace {

// A small valid tokenizer.json: the 256 byte characters, "Ġt" and "Ġth", one added token.
json small_tokenizer() {
  json vocab = json::object();
  for (uint32_t cp = 0; cp < 400; ++cp) {
    const int b = byte_of_char(cp);
    if (b < 0) continue;
    std::string s;  // cp as UTF-8 (below U+0800)
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  vocab["\xC4\xA0t"] = 256;   // "Ġt": " t"
  vocab["\xC4\xA0th"] = 257;  // " th"
  vocab["<|endoftext|>"] = 258;
  return {
      {"added_tokens",
       {{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}, {"lstrip", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"vocab", vocab},
        {"merges",
         json::array({json::array({"\xC4\xA0", "t"}), json::array({"\xC4\xA0t", "h"})})}}}};
}

std::string write(const TempDir& dir, const json& j) {
  const std::string path = dir.file("tokenizer.json");
  loom::test::write_bytes(path, j.dump());
  return path;
}

// What reading the file at `path` throws.
std::string read_error(const std::string& path) {
  return test::error_of([&] { read_hf_tokenizer_json(path); });
}

}  // namespace

TEST(HfTokenizerJson, ByteToCharacterMap) {
  EXPECT_EQ(byte_of_char('A'), 'A');
  EXPECT_EQ(byte_of_char('!'), '!');
  EXPECT_EQ(byte_of_char(0xA1), 0xA1);   // ¡
  EXPECT_EQ(byte_of_char(0x100), 0);     // Ā
  EXPECT_EQ(byte_of_char(0x120), ' ');   // Ġ
  EXPECT_EQ(byte_of_char(0x10A), '\n');  // Ċ
  EXPECT_EQ(byte_of_char(0x143), 0xAD);  // the 68th, the soft hyphen
  EXPECT_EQ(byte_of_char(' '), -1);      // a space stands for no byte
  EXPECT_EQ(byte_of_char(0x7F), -1);
  EXPECT_EQ(byte_of_char(0x144), -1);
  int bytes = 0;
  for (uint32_t cp = 0; cp < 0x200; ++cp) bytes += byte_of_char(cp) >= 0;
  EXPECT_EQ(bytes, 256);
}

TEST(HfTokenizerJson, TheCommittedFilesReadAsTheirSettingsSay) {
  const BpeModel kjv = read_hf_tokenizer_json(loom::test::tokenizer_fixture("kjv_bpe.json"));
  EXPECT_EQ(kjv.pattern, kGpt2Pattern);
  EXPECT_FALSE(kjv.whole_piece_first);
  EXPECT_EQ(kjv.tokens.size(), 1000u);
  EXPECT_EQ(kjv.tokens[0], "<|endoftext|>");
  EXPECT_EQ(kjv.specials.size(), 4u);
  EXPECT_EQ(kjv.specials[2], (std::pair<std::string, int32_t>{"<|begin_of_text|>", 1000}));
  EXPECT_EQ(kjv.merges.size(), 742u);
  const BpeModel llama = read_hf_tokenizer_json(loom::test::tokenizer_fixture("llama3_style.json"));
  EXPECT_EQ(llama.pattern, std::string(bpe_preset_format(BpePreset::kLlama3, 0).pattern));
  EXPECT_TRUE(llama.whole_piece_first);
}

TEST(HfTokenizerJson, MergesAsStringsOrPairsReadAlike) {
  TempDir dir;
  json j = small_tokenizer();
  const BpeModel pairs = read_hf_tokenizer_json(write(dir, j));
  j["model"]["merges"] = {"\xC4\xA0 t", "\xC4\xA0t h"};
  const BpeModel strings = read_hf_tokenizer_json(write(dir, j));
  ASSERT_EQ(pairs.merges.size(), 2u);
  ASSERT_EQ(strings.merges.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(pairs.merges[i].left, strings.merges[i].left);
    EXPECT_EQ(pairs.merges[i].right, strings.merges[i].right);
    EXPECT_EQ(pairs.merges[i].merged, strings.merges[i].merged);
  }
  EXPECT_EQ(pairs.merges[1].left, 256);
  EXPECT_EQ(pairs.merges[1].right, 'h');
  EXPECT_EQ(pairs.merges[1].merged, 257);
  EXPECT_EQ(pairs.tokens[257], " th");
}

namespace {

// A change to small_tokenizer() and the message (after "tokenizer.json <file>") it must give.
struct Refusal {
  std::function<void(json&)> change;
  std::string message;
};

std::vector<Refusal> refusals() {
  return {
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, ": model.type is \"WordPiece\""},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, ": model.dropout 0.1 is not supported"},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, ": model.byte_fallback true"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       ": model.continuing_subword_prefix \"##\" is not supported"},
      {[](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       ": normalizer {\"type\":\"NFKC\"} is not supported (null or NFC in a byte-level BPE)"},
      {[](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       ": decoder {\"type\":\"WordPiece\"}"},
      {[](json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
       ": pre_tokenizer.add_prefix_space true is not supported"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       ": pre_tokenizer {\"type\":\"Whitespace\"} is not supported"},
      {[](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"behavior", "Removed"}, {"pattern", {{"Regex", "x"}}}},
               {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       ": pre_tokenizer.pretokenizers[0] {"},
      {[](json& j) { j["added_tokens"][0]["lstrip"] = true; },
       ": added_tokens[0] (<|endoftext|>): lstrip true is not supported"},
      {[](json& j) { j["added_tokens"][0].erase("id"); }, ": added_tokens[0] {"},
      {[](json& j) {
         j["model"]["merges"][1] = {"\xC4\xA0t", "x\xC4\xA0"};
       },
       ": model.merges[1] [\"\xC4\xA0t\",\"x\xC4\xA0\"]: \"x\xC4\xA0\" is not in model.vocab"},
      {[](json& j) { j["model"]["merges"][0] = "a b c"; },
       ": model.merges[0] \"a b c\" is not two tokens separated by a space"},
      {[](json& j) { j["model"]["vocab"]["\xE4\xB8\xAD"] = 300; },  // 中: no byte-level text
       ": model.vocab entry \"\xE4\xB8\xAD\" (id 300) is not byte-level text"},
      {[](json& j) { j["model"]["vocab"]["xx"] = 256; },
       ": model.vocab gives id 256 to two tokens"},
      {[](json& j) { j["model"]["vocab"]["xx"] = -1; }, ": model.vocab[\"xx\"] is -1"},
      {[](json& j) { j["model"]["vocab"] = 5; }, ": model.vocab is not an object"},
      {[](json& j) { j.erase("model"); }, ": no \"model\" object"},
  };
}

}  // namespace

TEST(HfTokenizerJson, EachRefusalNamesTheFileAndTheField) {
  TempDir dir;
  const std::string f = dir.file("tokenizer.json");
  const std::vector<Refusal> cases = refusals();
  for (size_t i = 0; i < cases.size(); ++i) {
    json j = small_tokenizer();
    cases[i].change(j);
    const std::string e = read_error(write(dir, j));
    EXPECT_NE(e.find("tokenizer.json " + f + cases[i].message), std::string::npos)
        << "case " << i << "\nwant: " << cases[i].message << "\ngot:  " << e;
  }
  loom::test::write_bytes(f, "{\"model\": [1, 2,");
  EXPECT_NE(read_error(f).find(f + ": not valid JSON"), std::string::npos) << read_error(f);
  EXPECT_NE(read_error(dir.file("none.json")).find("none.json: cannot open it"), std::string::npos);
}
