// Tokenizer::token_id and load_tokenizer (data/tokenizer.h): which tokenizer a file is, Note
// [Choosing a tokenizer]. Leaves out: downloading files by name (loom reads local files only).
#include "data/tokenizer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/hf_tokenizer_json.h"
#include "data/tiktoken_file.h"
#include "data/wordpiece.h"
#include "data/wordpiece_files.h"

namespace loom::data {

namespace {

// The preset a rank file's name says, or its size; nullopt when neither does.
std::optional<BpePreset> guess_preset(const std::string& path, size_t num_ranks) {
  const std::string file = std::filesystem::path(path).filename().string();
  auto has = [&](const char* s) { return file.find(s) != std::string::npos; };
  if (has("r50k") || has("gpt2")) return BpePreset::kR50k;
  if (has("cl100k")) return BpePreset::kCl100k;
  if (has("o200k")) return BpePreset::kO200k;
  if (has("llama3") || has("llama-3") || file == "tokenizer.model") return BpePreset::kLlama3;
  switch (num_ranks) {
    case 50256:
      return BpePreset::kR50k;
    case 100256:
      return BpePreset::kCl100k;
    case 128000:
      return BpePreset::kLlama3;
    case 199998:
      return BpePreset::kO200k;
  }
  return std::nullopt;
}

bool starts_like_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "load_tokenizer: cannot open ", path, ": ", std::strerror(errno));
  char c = 0;
  while (in.get(c) && (c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
  }
  return in && c == '{';
}

bool is_vocab_txt(const std::string& path) {
  return std::filesystem::path(path).filename().string().ends_with("vocab.txt");
}

// A vocab.txt's normalizer: the preset ("uncased", "cased"), else the tokenizer_config.json
// beside it, else bert-base-uncased's.
BertNormalizerOptions vocab_txt_normalizer(const std::string& path, const std::string& preset) {
  BertNormalizerOptions o;
  if (preset == "cased") {
    o.lowercase = false;
  } else if (preset.empty()) {
    if (std::optional<BertNormalizerOptions> config = read_tokenizer_config(path)) o = *config;
  } else {
    LOOM_CHECK(preset == "uncased", "load_tokenizer: ", path,
               " is a WordPiece vocab.txt, whose presets are \"uncased\" (lower-case, strip "
               "accents) and \"cased\"; got \"",
               preset, "\"");
  }
  return o;
}

}  // namespace

int32_t Tokenizer::token_id(std::string_view token) const {
  std::optional<int32_t> id = find_token(token);
  LOOM_CHECK(id.has_value(), name(), ": has no token \"", token, "\"");
  return *id;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& preset) {
  if (spec == "bytes") {
    LOOM_CHECK(preset.empty(), "load_tokenizer: the byte tokenizer has no preset (got \"", preset,
               "\")");
    return std::make_unique<ByteTokenizer>();
  }
  if (std::filesystem::is_directory(spec)) {  // a Hugging Face model folder
    const std::string json = (std::filesystem::path(spec) / "tokenizer.json").string();
    LOOM_CHECK(std::filesystem::is_regular_file(json), "load_tokenizer: the folder ", spec,
               " has no tokenizer.json (loom reads a model folder's tokenizer from it; "
               "SentencePiece's tokenizer.model is not read)");
    return load_tokenizer(json, preset);
  }
  LOOM_CHECK(std::filesystem::is_regular_file(spec), "load_tokenizer: ", spec,
             " is not a file (give a tokenizer.json, a tiktoken rank file, a vocab.txt, a "
             "Hugging Face model folder, or \"bytes\")");
  if (starts_like_json(spec)) {
    LOOM_CHECK(preset.empty(), "load_tokenizer: ", spec,
               " is a tokenizer.json, which names its own normalizer, regex and special tokens; a "
               "preset (\"",
               preset, "\") is for tiktoken rank files and vocab.txt files");
    if (read_hf_model_type(spec) == "WordPiece")
      return std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::from_hf_json(spec));
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_hf_json(spec));
  }
  if (is_vocab_txt(spec))
    return std::make_unique<WordPieceTokenizer>(
        WordPieceTokenizer::from_vocab_txt(spec, vocab_txt_normalizer(spec, preset)));
  BpeModel m;
  m.tokens = read_tiktoken_file(spec);
  std::optional<BpePreset> p =
      preset.empty() ? guess_preset(spec, m.tokens.size()) : parse_bpe_preset(preset);
  LOOM_CHECK(p.has_value(), "load_tokenizer: ", spec, " is a tiktoken rank file of ",
             m.tokens.size(),
             " ranks whose name and size say no preset; name one (r50k_base, "
             "cl100k_base, o200k_base, llama3)");
  const TiktokenFormat f = bpe_preset_format(*p, int32_t(m.tokens.size()));
  m.name = f.name, m.source = spec, m.pattern = f.pattern, m.specials = f.specials;
  return std::make_unique<BpeTokenizer>(std::move(m));
}

}  // namespace loom::data
