// read_hf_wordpiece_json, read_wordpiece_vocab_txt and read_tokenizer_config
// (data/wordpiece_files.h): through nlohmann-json, each part checked against Note [WordPiece
// tokenizer.json], errors naming the file and the field. Leaves out: the BPE kind of tokenizer.json
// (data/hf_tokenizer_json.cpp).
#include "data/wordpiece_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer_json_checks.h"

namespace loom::data {

namespace {

using json = nlohmann::json;
constexpr int64_t kMaxId = 1 << 22;

using json_checks::shown;

struct Reader {
  const std::string& path;
  const json& root;

  const json& field(const char* key) const {
    static const json null;
    auto it = root.find(key);
    return it == root.end() ? null : *it;
  }
  void read_model(WordPieceModel& m) const;
  void read_normalizer(WordPieceModel& m) const;
  void read_pre_tokenizer() const;
  void read_decoder(WordPieceModel& m) const;
  void read_added_tokens(WordPieceModel& m) const;
  void read_post_processor(WordPieceModel& m) const;
};

void Reader::read_model(WordPieceModel& m) const {
  const json& model = field("model");
  LOOM_CHECK(model.is_object(), "tokenizer.json ", path, ": no \"model\" object");
  const std::string type = model.value("type", "");
  LOOM_CHECK(type == "WordPiece", "tokenizer.json ", path, ": model.type is \"", type,
             "\", not \"WordPiece\"");
  m.unk_token = model.value("unk_token", m.unk_token);
  m.continuing_subword_prefix = model.value("continuing_subword_prefix", "##");
  m.max_input_chars_per_word = model.value("max_input_chars_per_word", int64_t(100));
  LOOM_CHECK(model.contains("vocab") && model["vocab"].is_object(), "tokenizer.json ", path,
             ": model.vocab is not an object");
  for (const auto& [text, id] : model["vocab"].items()) {
    LOOM_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxId,
               "tokenizer.json ", path, ": model.vocab[", json(text).dump(), "] is ", shown(id),
               ", not an id in [0, ", kMaxId, ")");
    m.vocab.emplace_back(text, id.get<int32_t>());
  }
}

void Reader::read_normalizer(WordPieceModel& m) const {
  const json& n = field("normalizer");
  if (n.is_null()) {
    m.normalizer.reset();
    return;
  }
  LOOM_CHECK(n.is_object() && n.value("type", "") == "BertNormalizer", "tokenizer.json ", path,
             ": normalizer ", shown(n), " is not supported (BertNormalizer or null)");
  BertNormalizerOptions o;
  o.clean_text = n.value("clean_text", true);
  o.handle_chinese_chars = n.value("handle_chinese_chars", true);
  o.lowercase = n.value("lowercase", true);
  if (n.contains("strip_accents") && !n["strip_accents"].is_null())
    o.strip_accents = n["strip_accents"].get<bool>();
  m.normalizer = o;
}

void Reader::read_pre_tokenizer() const {
  const json& p = field("pre_tokenizer");
  LOOM_CHECK(p.is_object() && p.value("type", "") == "BertPreTokenizer", "tokenizer.json ", path,
             ": pre_tokenizer ", shown(p), " is not supported (only BertPreTokenizer)");
}

void Reader::read_decoder(WordPieceModel& m) const {
  const json& d = field("decoder");
  m.wordpiece_decoder = !d.is_null();
  if (d.is_null()) return;
  LOOM_CHECK(d.is_object() && d.value("type", "") == "WordPiece", "tokenizer.json ", path,
             ": decoder ", shown(d), " is not supported (WordPiece or null)");
  m.decoder_prefix = d.value("prefix", "##");
  m.decoder_cleanup = d.value("cleanup", true);
}

void Reader::read_added_tokens(WordPieceModel& m) const {
  const json& added = root.value("added_tokens", json::array());
  LOOM_CHECK(added.is_array(), "tokenizer.json ", path, ": added_tokens is not a list");
  for (size_t i = 0; i < added.size(); ++i)
    m.specials.push_back(json_checks::added_token(
        added[i], path, i, {"lstrip", "rstrip", "single_word", "normalized"}));
}

// BERT's template, its two special tokens named as the file names them.
void Reader::read_post_processor(WordPieceModel& m) const {
  const json& p = field("post_processor");
  if (p.is_null()) return;
  const std::string type = p.is_object() ? p.value("type", "") : "";
  if (type == "BertProcessing") {
    LOOM_CHECK(p.contains("cls") && p["cls"].is_array() && p["cls"].size() == 2 &&
                   p["cls"][0].is_string() && p.contains("sep") && p["sep"].is_array() &&
                   p["sep"].size() == 2 && p["sep"][0].is_string(),
               "tokenizer.json ", path, ": post_processor ", shown(p),
               " has no [token, id] pairs cls and sep");
    m.cls_token = p["cls"][0].get<std::string>(), m.sep_token = p["sep"][0].get<std::string>();
    return;
  }
  LOOM_CHECK(type == "TemplateProcessing", "tokenizer.json ", path, ": post_processor ", shown(p),
             " is not supported (BERT's TemplateProcessing, BertProcessing or null)");
  const json& single = p.value("single", json::array());
  auto special = [](const json& name, int type_id) {
    return json{{"SpecialToken", {{"id", name}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* name, int type_id) {
    return json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  const bool shaped = single.is_array() && single.size() == 3 &&
                      single[0].contains("SpecialToken") && single[2].contains("SpecialToken");
  const json cls = shaped ? single[0]["SpecialToken"].value("id", json()) : json();
  const json sep = shaped ? single[2]["SpecialToken"].value("id", json()) : json();
  const json want_single = json::array({special(cls, 0), sequence("A", 0), special(sep, 0)});
  const json want_pair = json::array(
      {special(cls, 0), sequence("A", 0), special(sep, 0), sequence("B", 1), special(sep, 1)});
  LOOM_CHECK(shaped && cls.is_string() && sep.is_string() && single == want_single &&
                 p.value("pair", json()) == want_pair,
             "tokenizer.json ", path, ": post_processor ", shown(p),
             " is not BERT's template ([CLS] $A [SEP], pair [CLS] $A [SEP] $B:1 [SEP]:1)");
  for (const json& name : {cls, sep}) {
    const json& st =
        p.value("special_tokens", json::object()).value(name.get<std::string>(), json());
    LOOM_CHECK(st.is_object() && st.value("ids", json()).size() == 1 &&
                   st.value("tokens", json()) == json::array({name}),
               "tokenizer.json ", path, ": post_processor.special_tokens[", name.dump(), "] ",
               shown(st), " is not one token of that name");
  }
  m.cls_token = cls.get<std::string>(), m.sep_token = sep.get<std::string>();
}

}  // namespace

WordPieceModel read_hf_wordpiece_json(const std::string& path) {
  const json root = json_checks::parse_file<json>(path, "tokenizer.json");
  LOOM_CHECK(root.is_object(), "tokenizer.json ", path, ": not a JSON object");
  WordPieceModel m;
  m.name = "tokenizer.json", m.source = path;
  Reader r{path, root};
  try {
    r.read_model(m);
    r.read_normalizer(m);
    r.read_pre_tokenizer();
    r.read_decoder(m);
    r.read_added_tokens(m);
    r.read_post_processor(m);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    LOOM_FAIL("tokenizer.json ", path, ": ", e.what());
  }
  return m;
}

WordPieceModel read_wordpiece_vocab_txt(const std::string& path,
                                        const BertNormalizerOptions& normalizer) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "vocab.txt ", path, ": cannot open it: ", std::strerror(errno));
  WordPieceModel m;
  m.name = "vocab.txt", m.source = path, m.normalizer = normalizer;
  std::string line;
  for (int32_t id = 0; std::getline(in, line); ++id) {
    LOOM_CHECK(id < kMaxId, "vocab.txt ", path, ": more than ", kMaxId, " lines");
    const size_t end = line.find_last_not_of(" \t\r\n\v\f");
    line.erase(end == std::string::npos ? 0 : end + 1);
    m.vocab.emplace_back(line, id);
  }
  LOOM_CHECK(!m.vocab.empty(), "vocab.txt ", path, ": the file is empty");
  std::unordered_map<std::string, int32_t> id_of;
  for (const auto& [text, id] : m.vocab) id_of[text] = id;
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (auto it = id_of.find(name); it != id_of.end()) m.specials.emplace_back(name, it->second);
  LOOM_CHECK(id_of.count(m.unk_token), "vocab.txt ", path, ": has no line \"", m.unk_token,
             "\" (the unknown token)");
  return m;
}

std::optional<BertNormalizerOptions> read_tokenizer_config(const std::string& vocab_path) {
  const std::filesystem::path config =
      std::filesystem::path(vocab_path).parent_path() / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(config)) return std::nullopt;
  const json root = json_checks::parse_file<json>(config.string(), "tokenizer_config.json");
  BertNormalizerOptions o;
  try {
    o.lowercase = root.value("do_lower_case", true);
    o.handle_chinese_chars = root.value("tokenize_chinese_chars", true);
    if (root.contains("strip_accents") && !root["strip_accents"].is_null())
      o.strip_accents = root["strip_accents"].get<bool>();
  } catch (const json::exception& e) {
    LOOM_FAIL("tokenizer_config.json ", config.string(), ": ", e.what());
  }
  return o;
}

}  // namespace loom::data
