// data/bpe_presets: the names, each preset's special tokens (tiktoken's ids; Llama 3's 256 from
// the rank file's size), and every regex compiling under PCRE2.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "data/bpe_presets.h"
#include "data/bpe_regex.h"

using namespace loom;
using namespace loom::data;

TEST(BpePresets, NamesAndAliases) {
  EXPECT_EQ(parse_bpe_preset("gpt2"), BpePreset::kR50k);
  EXPECT_EQ(parse_bpe_preset("r50k_base"), BpePreset::kR50k);
  EXPECT_EQ(parse_bpe_preset("cl100k"), BpePreset::kCl100k);
  EXPECT_EQ(parse_bpe_preset("o200k_base"), BpePreset::kO200k);
  EXPECT_EQ(parse_bpe_preset("llama3"), BpePreset::kLlama3);
  EXPECT_EQ(bpe_preset_name(BpePreset::kCl100k), "cl100k_base");
  try {
    parse_bpe_preset("llama2");
    FAIL() << "expected a loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "BPE preset \"llama2\" is not one of r50k_base (gpt2), cl100k_base, o200k_base, "
                  "llama3"),
              std::string::npos)
        << e.what();
  }
}

TEST(BpePresets, SpecialTokens) {
  using Specials = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_EQ(bpe_preset_format(BpePreset::kR50k, 50256).specials,
            (Specials{{"<|endoftext|>", 50256}}));
  EXPECT_EQ(bpe_preset_format(BpePreset::kO200k, 0).specials,
            (Specials{{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}));
  const Specials cl = bpe_preset_format(BpePreset::kCl100k, 0).specials;
  ASSERT_EQ(cl.size(), 5u);
  EXPECT_EQ(cl[0], (std::pair<std::string, int32_t>{"<|endoftext|>", 100257}));
  EXPECT_EQ(cl[4], (std::pair<std::string, int32_t>{"<|endofprompt|>", 100276}));
  const Specials llama = bpe_preset_format(BpePreset::kLlama3, 128000).specials;
  ASSERT_EQ(llama.size(), 256u);
  EXPECT_EQ(llama[0], (std::pair<std::string, int32_t>{"<|begin_of_text|>", 128000}));
  EXPECT_EQ(llama[1], (std::pair<std::string, int32_t>{"<|end_of_text|>", 128001}));
  EXPECT_EQ(llama[6], (std::pair<std::string, int32_t>{"<|start_header_id|>", 128006}));
  EXPECT_EQ(llama[9], (std::pair<std::string, int32_t>{"<|eot_id|>", 128009}));
  EXPECT_EQ(llama[10], (std::pair<std::string, int32_t>{"<|reserved_special_token_5|>", 128010}));
  EXPECT_EQ(llama[255],
            (std::pair<std::string, int32_t>{"<|reserved_special_token_250|>", 128255}));
}

TEST(BpePresets, EveryRegexCompiles) {
  for (BpePreset p : {BpePreset::kR50k, BpePreset::kCl100k, BpePreset::kO200k, BpePreset::kLlama3})
    EXPECT_NO_THROW(BpeRegex(bpe_preset_format(p, 0).pattern, "preset")) << bpe_preset_name(p);
  EXPECT_NO_THROW(BpeRegex(kGpt2Pattern, "gpt2"));
}
