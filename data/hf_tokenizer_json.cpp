// read_hf_tokenizer_json (data/hf_tokenizer_json.h): tokenizer.json through nlohmann-json, each
// part checked against Note [tokenizer.json support], errors naming the file and the field.
// Leaves out: writing tokenizer.json (`tokenizers` does that; scripts/make-tokenizer-fixtures.py).
#include "data/hf_tokenizer_json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "data/bpe_presets.h"
#include "data/metaspace.h"
#include "data/tokenizer_json_checks.h"

namespace loom::data {

namespace {

using json = nlohmann::json;

using json_checks::shown;

// The field's value, when it is there and not null; what `fallback` says otherwise.
template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

// The bytes a byte-level string stands for; false when a character stands for no byte.
bool bytes_of_text(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + size_t(len) > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x3F >> (len - 1));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    const int b = byte_of_char(cp);
    if (b < 0) return false;
    out += char(b);
    i += size_t(len);
  }
  return true;
}

std::string regex_of_string(std::string_view s) {  // a literal as a regex
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c) && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

// The part of the root called `key`, or null.
const json& part(const json& root, const char* key) {
  static const json kNull;
  auto it = root.find(key);
  return it == root.end() ? kNull : *it;
}

struct Reader {
  const std::string& path;
  const json& root;
  bool sentencepiece = false;  // Note [SentencePiece BPE]: vocabulary text is text, not bytes
  std::unordered_map<int32_t, std::string> not_bytes;  // vocab text that stands for no bytes
  std::unordered_map<std::string, int32_t> id_of;      // vocab text -> id

  void check_unsupported() const;
  bool byte_level_nfc() const;
  void read_model(BpeModel& m);
  void read_vocab(const json& vocab, BpeModel& m);
  void read_merges(const json& merges, BpeModel& m) const;
  std::string read_pattern() const;
  void read_added_tokens(BpeModel& m);
  // The SentencePiece parts and the post-processor.
  Metaspace read_metaspace() const;
  void read_normalizer(Metaspace& ms) const;
  void read_metaspace_pre_tokenizer(Metaspace& ms) const;
  void read_decoder(Metaspace& ms) const;
  void read_unknown(const json& model, Metaspace& ms) const;
  BpeModel::Template read_post_processor() const;
  void add_template(const json& processor, BpeModel::Template& t) const;
  std::vector<int32_t> template_ids(const json& processor, const json& item) const;
};

// A file of Note [SentencePiece BPE]: its pre-tokenizer is Metaspace, or it has none and a
// normalizer (Llama 2's Prepend and Replace).
bool is_sentencepiece(const json& root) {
  const json& pre = part(root, "pre_tokenizer");
  if (pre.is_object()) return pre.value("type", "") == "Metaspace";
  return !part(root, "normalizer").is_null();
}

// A byte-level file's normalizer: none, or NFC (Qwen2's), alone or in a Sequence.
bool Reader::byte_level_nfc() const {
  const json& n = part(root, "normalizer");
  if (n.is_null()) return false;
  const json list =
      n.value("type", "") == "Sequence" ? n.value("normalizers", json::array()) : json::array({n});
  LOOM_CHECK(list.size() <= 1 && (list.empty() || list[0].value("type", "") == "NFC"),
             "tokenizer.json ", path, ": normalizer ", shown(n),
             " is not supported (null or NFC in a byte-level BPE)");
  return !list.empty();
}

void Reader::check_unsupported() const {
  if (sentencepiece) return;  // read_metaspace checks those parts
  (void)byte_level_nfc();     // refuses another normalizer
  const json& d = part(root, "decoder");
  LOOM_CHECK(d.is_null() || d.value("type", "") == "ByteLevel", "tokenizer.json ", path,
             ": decoder ", shown(d), " is not supported (only ByteLevel)");
  const json& model = part(root, "model");
  LOOM_CHECK(!model.is_object() || !get_or<bool>(model, "byte_fallback", false), "tokenizer.json ",
             path, ": model.byte_fallback true is not supported in a byte-level BPE");
}

void Reader::read_model(BpeModel& m) {
  LOOM_CHECK(root.contains("model") && root["model"].is_object(), "tokenizer.json ", path,
             ": no \"model\" object");
  const json& model = root["model"];
  const std::string type = model.value("type", "BPE");
  LOOM_CHECK(
      type == "BPE", "tokenizer.json ", path, ": model.type is \"", type,
      "\"; this reader takes byte-level BPE only (WordPiece: WordPieceTokenizer::from_hf_json)");
  LOOM_CHECK(get_or<double>(model, "dropout", 0.0) == 0.0, "tokenizer.json ", path,
             ": model.dropout ", shown(model["dropout"]), " is not supported (only null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    LOOM_CHECK(get_or<std::string>(model, key, "").empty(), "tokenizer.json ", path, ": model.",
               key, " ", shown(model[key]), " is not supported (only null)");
  m.whole_piece_first = get_or<bool>(model, "ignore_merges", false);
  LOOM_CHECK(model.contains("vocab") && model["vocab"].is_object(), "tokenizer.json ", path,
             ": model.vocab is not an object");
  read_vocab(model["vocab"], m);
  const json& merges = model.contains("merges") ? model["merges"] : json::array();
  LOOM_CHECK(merges.is_array(), "tokenizer.json ", path, ": model.merges is not a list");
  read_merges(merges, m);
}

void Reader::read_vocab(const json& vocab, BpeModel& m) {
  std::string bytes;
  for (const auto& [text, id_json] : vocab.items()) {
    LOOM_CHECK(id_json.is_number_integer() && id_json.get<int64_t>() >= 0 &&
                   id_json.get<int64_t>() < (1 << 22),
               "tokenizer.json ", path, ": model.vocab[", json(text).dump(), "] is ",
               shown(id_json), ", not an id in [0, 4194304)");
    const int32_t id = id_json.get<int32_t>();
    id_of[text] = id;
    if (size_t(id) >= m.tokens.size()) m.tokens.resize(size_t(id) + 1);
    LOOM_CHECK(m.tokens[size_t(id)].empty(), "tokenizer.json ", path, ": model.vocab gives id ", id,
               " to two tokens (one is ", json(text).dump(), ")");
    // Text that stands for no bytes must be an added token's (read_added_tokens).
    if (sentencepiece) {
      m.tokens[size_t(id)] = text;
    } else if (bytes_of_text(text, bytes)) {
      m.tokens[size_t(id)] = bytes;
    } else {
      m.tokens[size_t(id)] = text;
      not_bytes[id] = text;
    }
  }
}

// "a b" strings (older files) or [a, b] pairs; a merge's rank is its place in the list.
void Reader::read_merges(const json& merges, BpeModel& m) const {
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      LOOM_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                 "tokenizer.json ", path, ": model.merges[", r, "] ", shown(e),
                 " is not two tokens separated by a space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {
      LOOM_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                 "tokenizer.json ", path, ": model.merges[", r, "] ", shown(e),
                 " is not a pair of tokens");
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    }
    for (const std::string& t : {a, b, a + b})
      LOOM_CHECK(id_of.count(t), "tokenizer.json ", path, ": model.merges[", r, "] ", shown(e),
                 ": ", json(t).dump(), " is not in model.vocab");
    m.merges.push_back({id_of.at(a), id_of.at(b), id_of.at(a + b)});
  }
}

// The regex of the pre-tokenizer: ByteLevel's (GPT-2's), or a Split's followed by a ByteLevel
// without regex.
std::string Reader::read_pattern() const {
  const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
  const std::string type = pre.is_object() ? pre.value("type", "") : "";
  auto byte_level = [&](const json& p, const std::string& field) {
    LOOM_CHECK(p.value("type", "") == "ByteLevel", "tokenizer.json ", path, ": ", field, " ",
               shown(p), " is not supported (ByteLevel, or Sequence [Split, ByteLevel])");
    LOOM_CHECK(!p.value("add_prefix_space", false), "tokenizer.json ", path, ": ", field,
               ".add_prefix_space true is not supported");
    return p.value("use_regex", true);
  };
  if (type != "Sequence") return byte_level(pre, "pre_tokenizer") ? std::string(kGpt2Pattern) : "";
  const json& seq = pre.value("pretokenizers", json::array());
  LOOM_CHECK(seq.size() == 2, "tokenizer.json ", path, ": pre_tokenizer.pretokenizers has ",
             seq.size(), " entries; loom reads [Split, ByteLevel]");
  const json& split = seq[0];
  LOOM_CHECK(split.value("type", "") == "Split" && split.value("behavior", "") == "Isolated" &&
                 !split.value("invert", false),
             "tokenizer.json ", path, ": pre_tokenizer.pretokenizers[0] ", shown(split),
             " is not supported (Split, behavior Isolated, invert false)");
  LOOM_CHECK(!byte_level(seq[1], "pre_tokenizer.pretokenizers[1]"), "tokenizer.json ", path,
             ": pre_tokenizer.pretokenizers[1].use_regex true after a Split is not supported");
  const json& pattern = split.value("pattern", json::object());
  if (pattern.contains("Regex")) return pattern["Regex"].get<std::string>();
  LOOM_CHECK(pattern.contains("String"), "tokenizer.json ", path,
             ": pre_tokenizer.pretokenizers[0].pattern ", shown(pattern),
             " is neither {\"Regex\": ...} nor {\"String\": ...}");
  return regex_of_string(pattern["String"].get<std::string>());
}

void Reader::read_added_tokens(BpeModel& m) {
  const json& added = root.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    auto [content, id] =
        json_checks::added_token(added[i], path, i, {"lstrip", "rstrip", "single_word"});
    // Hugging Face finds a "normalized" added token in the normalized text, loom in the text.
    LOOM_CHECK(!sentencepiece || part(root, "normalizer").is_null() ||
                   !added[i].value("normalized", false),
               "tokenizer.json ", path, ": added_tokens[", i, "] (", content,
               "): normalized true beside a normalizer is not supported");
    m.specials.emplace_back(content, id);
    if (not_bytes.erase(id)) m.tokens[size_t(id)].clear();  // the special's text stands
  }
}

// Note [SentencePiece BPE]: where the "▁" comes from (the normalizer, or the Metaspace
// pre-tokenizer), the unknown token, and the decoder.
Metaspace Reader::read_metaspace() const {
  Metaspace ms;
  const json& pre = part(root, "pre_tokenizer");
  if (pre.is_null()) {
    read_normalizer(ms);
  } else {
    LOOM_CHECK(part(root, "normalizer").is_null(), "tokenizer.json ", path, ": normalizer ",
               shown(part(root, "normalizer")),
               " beside a Metaspace pre-tokenizer is not supported (only null)");
    read_metaspace_pre_tokenizer(ms);
  }
  read_unknown(root["model"], ms);
  read_decoder(ms);
  return ms;
}

// Llama 2's legacy layout: Replace(" " -> "▁") with or without Prepend("▁") before it, alone or
// in a Sequence.
void Reader::read_normalizer(Metaspace& ms) const {
  const json& n = part(root, "normalizer");
  const json list =
      n.value("type", "") == "Sequence" ? n.value("normalizers", json::array()) : json::array({n});
  ms.prepend = Metaspace::Prepend::kNever;
  bool replaces = false;
  for (const json& step : list) {
    const std::string type = step.value("type", "");
    if (type == "Prepend" && step.value("prepend", "") == ms.replacement) {
      ms.prepend = Metaspace::Prepend::kEvery;
    } else if (type == "Replace" &&
               step.value("pattern", json::object()).value("String", "") == " " &&
               step.value("content", "") == ms.replacement) {
      replaces = true;
    } else {
      LOOM_FAIL("tokenizer.json ", path, ": normalizer step ", shown(step),
                " is not supported (Prepend \"\u2581\" and Replace \" \" -> \"\u2581\": a "
                "SentencePiece BPE)");
    }
  }
  LOOM_CHECK(replaces, "tokenizer.json ", path, ": normalizer ", shown(n),
             " does not replace spaces with \"\u2581\" and there is no pre-tokenizer");
}

// Metaspace: replacement, prepend_scheme (or the older add_prefix_space), split.
void Reader::read_metaspace_pre_tokenizer(Metaspace& ms) const {
  const json& pre = part(root, "pre_tokenizer");
  ms.replacement = pre.value("replacement", ms.replacement);
  LOOM_CHECK(!ms.replacement.empty() && ms.replacement.find(' ') == std::string::npos,
             "tokenizer.json ", path, ": pre_tokenizer.replacement ", shown(pre["replacement"]),
             " must be one character other than a space");
  const std::string scheme = pre.contains("prepend_scheme")
                                 ? pre["prepend_scheme"].get<std::string>()
                             : pre.value("add_prefix_space", true) ? "always"
                                                                   : "never";
  LOOM_CHECK(scheme == "always" || scheme == "first" || scheme == "never", "tokenizer.json ", path,
             ": pre_tokenizer.prepend_scheme \"", scheme, "\" is not always, first or never");
  ms.prepend = scheme == "always"  ? Metaspace::Prepend::kAlways
               : scheme == "first" ? Metaspace::Prepend::kFirst
                                   : Metaspace::Prepend::kNever;
  ms.split = pre.value("split", true);
}

void Reader::read_unknown(const json& model, Metaspace& ms) const {
  ms.byte_fallback = get_or<bool>(model, "byte_fallback", false);
  ms.fuse_unk = get_or<bool>(model, "fuse_unk", false);
  const std::string unk = get_or<std::string>(model, "unk_token", "");
  if (unk.empty()) return;
  LOOM_CHECK(id_of.count(unk), "tokenizer.json ", path, ": model.unk_token \"", unk,
             "\" is not in model.vocab");
  ms.unk = id_of.at(unk);
}

// A Sequence of Replace("▁" -> " "), ByteFallback, Fuse and Strip(" ", n, 0); or Metaspace's own;
// or none (the tokens' text as it is).
void Reader::read_decoder(Metaspace& ms) const {
  const json& d = part(root, "decoder");
  ms.decode_replacement = ms.decode_byte_fallback = false;
  ms.strip_leading = 0;
  if (d.is_null()) return;
  if (d.value("type", "") == "Metaspace") {
    ms.decode_replacement = true;
    ms.first_token_unmarked =
        d.value("prepend_scheme", d.value("add_prefix_space", true) ? "always" : "never") !=
        "never";
    return;
  }
  const json list =
      d.value("type", "") == "Sequence" ? d.value("decoders", json::array()) : json::array({d});
  for (const json& step : list) {
    const std::string type = step.value("type", "");
    if (type == "Replace" &&
        step.value("pattern", json::object()).value("String", "") == ms.replacement &&
        step.value("content", "") == " ") {
      ms.decode_replacement = true;
    } else if (type == "ByteFallback") {
      ms.decode_byte_fallback = true;
    } else if (type == "Strip" && step.value("content", "") == " " && step.value("stop", 0) == 0) {
      ms.strip_leading = step.value("start", 0);
    } else {
      LOOM_CHECK(type == "Fuse", "tokenizer.json ", path, ": decoder step ", shown(step),
                 " is not supported (Replace \"\u2581\" -> \" \", ByteFallback, Fuse, Strip "
                 "leading spaces, or Metaspace)");
    }
  }
}

// The single-text template of the post-processor; a kind loom cannot run is named, for
// post_process to refuse (encoding itself does not need it).
BpeModel::Template Reader::read_post_processor() const {
  BpeModel::Template t;
  const json& p = part(root, "post_processor");
  if (p.is_null()) return t;
  if (p.value("type", "") != "Sequence") {
    add_template(p, t);
    return t;
  }
  for (const json& step : p.value("processors", json::array())) add_template(step, t);
  return t;
}

void Reader::add_template(const json& p, BpeModel::Template& t) const {
  const std::string type = p.value("type", "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    t.before.push_back(p.at("cls").at(1).get<int32_t>());
    t.after.push_back(p.at("sep").at(1).get<int32_t>());
    return;
  }
  if (type != "TemplateProcessing") return void(t.unsupported = shown(p));
  bool text_seen = false;
  for (const json& item : p.value("single", json::array())) {
    if (item.contains("Sequence")) {
      LOOM_CHECK(item["Sequence"].value("id", "") == "A", "tokenizer.json ", path,
                 ": post_processor.single item ", shown(item), " is not the text A");
      text_seen = true;
      continue;
    }
    std::vector<int32_t>& side = text_seen ? t.after : t.before;
    for (int32_t id : template_ids(p, item)) side.push_back(id);
  }
}

// The ids of a SpecialToken item of a TemplateProcessing, from its special_tokens table.
std::vector<int32_t> Reader::template_ids(const json& p, const json& item) const {
  LOOM_CHECK(item.contains("SpecialToken"), "tokenizer.json ", path,
             ": post_processor.single item ", shown(item), " is neither Sequence nor SpecialToken");
  const std::string name = item["SpecialToken"].value("id", "");
  const json& table = p.value("special_tokens", json::object());
  LOOM_CHECK(table.contains(name), "tokenizer.json ", path,
             ": post_processor.special_tokens has no \"", name, "\"");
  return table[name].value("ids", std::vector<int32_t>{});
}

// Finds root.model.type and stops the parse there (read_hf_model_type).
struct ModelTypeSax : json::json_sax_t {
  std::vector<std::string> path;  // how each open container was entered: "" (root), a key, "[]"
  std::vector<char> arrays;       // whether each open container is an array
  std::string current_key;        // the key of the value being read
  std::optional<std::string> type;
  bool has_model = false;
  std::string error;

  std::string child() const { return arrays.empty() ? "" : arrays.back() ? "[]" : current_key; }
  bool open(bool array) {
    path.push_back(child());
    arrays.push_back(array);
    has_model = has_model || (!array && path.size() == 2 && path[1] == "model");
    return true;
  }
  bool close() {
    path.pop_back(), arrays.pop_back();
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& s) override {
    if (path.size() == 2 && path[1] == "model" && !arrays.back() && current_key == "type") {
      type = s;
      return false;  // found: stop
    }
    return true;
  }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    current_key = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }
};

}  // namespace

std::string read_hf_model_type(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "tokenizer.json ", path, ": cannot open it: ", std::strerror(errno));
  ModelTypeSax sax;
  json::sax_parse(in, &sax);
  if (sax.type) return *sax.type;
  LOOM_CHECK(sax.error.empty(), "tokenizer.json ", path, ": not valid JSON: ", sax.error);
  LOOM_CHECK(sax.has_model, "tokenizer.json ", path, ": no \"model\" object");
  return "";
}

int byte_of_char(uint32_t cp) {
  // Characters U+0000..U+0143 -> bytes, built once from the rule.
  static const std::vector<int16_t> table = [] {
    std::vector<int16_t> t(256 + 68, -1);
    int16_t next = 256;  // the bytes that are not printable, in order, from U+0100
    for (int16_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[size_t(printable ? b : next++)] = b;
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

BpeModel read_hf_tokenizer_json(const std::string& path) {
  const json root = json_checks::parse_file<json>(path, "tokenizer.json");
  LOOM_CHECK(root.is_object(), "tokenizer.json ", path, ": not a JSON object");
  BpeModel m;
  m.name = "tokenizer.json", m.source = path;
  Reader r{path, root, is_sentencepiece(root), {}, {}};
  try {
    r.check_unsupported();
    r.read_model(m);
    if (r.sentencepiece) {
      m.metaspace = r.read_metaspace();
    } else {
      m.pattern = r.read_pattern();
      m.nfc = r.byte_level_nfc();
    }
    r.read_added_tokens(m);
    m.single = r.read_post_processor();
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    LOOM_FAIL("tokenizer.json ", path, ": ", e.what());
  }
  for (const auto& [id, text] : r.not_bytes)
    LOOM_FAIL("tokenizer.json ", path, ": model.vocab entry ", json(text).dump(), " (id ", id,
              ") is not byte-level text (a character of it stands for no byte) nor an added token");
  return m;
}

}  // namespace loom::data
