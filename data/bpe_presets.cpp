// The presets of data/bpe_presets.h: the regexes are tiktoken's (its openai_public module, version
// 0.14) and Llama 3's (the tokenizer module of meta-llama/llama3), character for character.
#include "data/bpe_presets.h"

#include <array>

#include "core/error.h"

namespace loom::data {

namespace {

constexpr std::string_view kR50k =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)";
constexpr std::string_view kCl100k =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
constexpr std::string_view kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Each preset's name (first) and the other names parse_bpe_preset takes for it.
struct PresetNames {
  BpePreset preset;
  std::array<std::string_view, 3> names;
};
constexpr PresetNames kPresetNames[] = {
    {BpePreset::kR50k, {"r50k_base", "r50k", "gpt2"}},
    {BpePreset::kCl100k, {"cl100k_base", "cl100k"}},
    {BpePreset::kO200k, {"o200k_base", "o200k"}},
    {BpePreset::kLlama3, {"llama3"}},
};

// Llama 3's special tokens (the tokenizer module of meta-llama/llama3): ten named, the rest
// reserved, 256 in all, numbered from the end of the ranks.
std::vector<std::pair<std::string, int32_t>> llama3_specials(int32_t base) {
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    "<|reserved_special_token_2|>",
                                    "<|reserved_special_token_3|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    "<|reserved_special_token_4|>",
                                    "<|eot_id|>"};
  for (int i = 5; i < 256 - 5; ++i) names.push_back(str("<|reserved_special_token_", i, "|>"));
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], base + int32_t(i));
  return out;
}

}  // namespace

BpePreset parse_bpe_preset(std::string_view name) {
  for (const PresetNames& p : kPresetNames)
    for (std::string_view n : p.names)
      if (!n.empty() && n == name) return p.preset;
  LOOM_FAIL("BPE preset \"", name,
            "\" is not one of r50k_base (gpt2), cl100k_base, o200k_base, llama3");
}

std::string_view bpe_preset_name(BpePreset preset) {
  for (const PresetNames& p : kPresetNames)
    if (p.preset == preset) return p.names[0];
  return "?";
}

TiktokenFormat bpe_preset_format(BpePreset preset, int32_t num_base_tokens) {
  TiktokenFormat f{std::string(bpe_preset_name(preset)), "", {}};
  switch (preset) {
    case BpePreset::kR50k:
      f.pattern = kR50k;
      f.specials = {{"<|endoftext|>", 50256}};
      break;
    case BpePreset::kCl100k:
      f.pattern = kCl100k;
      f.specials = {{"<|endoftext|>", 100257},
                    {"<|fim_prefix|>", 100258},
                    {"<|fim_middle|>", 100259},
                    {"<|fim_suffix|>", 100260},
                    {"<|endofprompt|>", 100276}};
      break;
    case BpePreset::kO200k:
      f.pattern = kO200k;
      f.specials = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
      break;
    case BpePreset::kLlama3:
      f.pattern = kLlama3;
      f.specials = llama3_specials(num_base_tokens);
      break;
  }
  return f;
}

}  // namespace loom::data
