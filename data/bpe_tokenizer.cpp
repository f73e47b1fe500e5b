// BpeTokenizer (data/bpe_tokenizer.h): building the tables from a BpeModel, encode (Note [BPE
// encoding], and Note [SentencePiece BPE] in data/metaspace.h) and decode. Leaves out: several
// threads (a caller may split its texts).
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "data/hf_tokenizer_json.h"
#include "data/tiktoken_file.h"
#include "data/unicode_text.h"

namespace loom::data {

BpeTokenizer BpeTokenizer::from_tiktoken(const std::string& path, BpePreset preset) {
  BpeModel m;
  m.tokens = read_tiktoken_file(path);
  const TiktokenFormat f = bpe_preset_format(preset, int32_t(m.tokens.size()));
  m.name = f.name, m.source = path, m.pattern = f.pattern, m.specials = f.specials;
  return BpeTokenizer(std::move(m));
}

BpeTokenizer BpeTokenizer::from_tiktoken(const std::string& path, const TiktokenFormat& format) {
  BpeModel m;
  m.tokens = read_tiktoken_file(path);
  m.name = format.name, m.source = path, m.pattern = format.pattern, m.specials = format.specials;
  return BpeTokenizer(std::move(m));
}

BpeTokenizer BpeTokenizer::from_hf_json(const std::string& path) {
  return BpeTokenizer(read_hf_tokenizer_json(path));
}

BpeTokenizer::BpeTokenizer(BpeModel model)
    : name_(model.name),
      source_(model.source),
      pattern_(model.pattern),
      whole_piece_first_(model.whole_piece_first),
      nfc_(model.nfc),
      metaspace_(model.metaspace),
      single_(model.single) {
  bytes_ = model.tokens;
  if (const int64_t twice = ids_.build(bytes_); twice >= 0)
    LOOM_FAIL(name(), ": tokens ", ids_.find(bytes_[size_t(twice)]), " and ", twice,
              " have the same bytes \"", bytes_[size_t(twice)], "\"");
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_ids_[size_t(b)] = ids_.find(std::string_view(&c, 1));
  }
  for (const auto& [text, id] : model.specials) {
    LOOM_CHECK(!text.empty() && id >= 0, name(), ": special token \"", text, "\" with id ", id,
               " (a special token needs text and an id >= 0)");
    if (size_t(id) >= bytes_.size()) bytes_.resize(size_t(id) + 1);
    LOOM_CHECK(bytes_[size_t(id)].empty() || bytes_[size_t(id)] == text, name(),
               ": special token \"", text, "\" has id ", id, ", which is the ordinary token \"",
               bytes_[size_t(id)], "\"");
    bytes_[size_t(id)] = text;
  }
  specials_ = SpecialTokenMatcher(model.specials, name());
  build_merges(model);
  if (!pattern_.empty()) regex_ = std::make_unique<BpeRegex>(pattern_, name());
  if (metaspace_) build_metaspace(model);
}

// The <0xNN> tokens, both ways; the unknown token's id checked.
void BpeTokenizer::build_metaspace(const BpeModel& model) {
  LOOM_CHECK(pattern_.empty(), name(), ": a SentencePiece BPE has no pre-tokenizer regex");
  const int32_t unk = metaspace_->unk;
  LOOM_CHECK(unk < int64_t(bytes_.size()) && (unk < 0 || !bytes_[size_t(unk)].empty()), name(),
             ": the unknown token's id ", unk, " is no token");
  fallback_ids_.fill(-1);
  fallback_byte_.assign(bytes_.size(), -1);
  // Cutting before marks is exact when no merge can end in one and the mark is a token (else a
  // fused <unk> could span it).
  cut_runs_ = !metaspace_->split && ids_.find(metaspace_->replacement) >= 0 &&
              std::none_of(bytes_.begin(), bytes_.end(),
                           [&](const std::string& t) { return metaspace_->joins_before_mark(t); });
  for (size_t id = 0; id < model.tokens.size(); ++id) {
    const int b = Metaspace::fallback_byte(model.tokens[id]);
    if (b < 0) continue;
    fallback_byte_[id] = int16_t(b);
    fallback_ids_[size_t(b)] = int32_t(id);
  }
}

// tiktoken's rule: every split of a token into two tokens merges into it, at its id; Hugging
// Face's: the merges list in order (Note [BPE merge order] in data/bpe_merges.h).
void BpeTokenizer::build_merges(const BpeModel& model) {
  if (!model.merges.empty()) {
    for (size_t r = 0; r < model.merges.size(); ++r) {
      const BpeModel::Merge& m = model.merges[r];
      merges_.set(m.left, m.right, {int32_t(r), m.merged});
    }
    return;
  }
  for (size_t id = 0; id < model.tokens.size(); ++id) {
    const std::string_view t = model.tokens[id];
    for (size_t k = 1; k < t.size(); ++k) {
      const int32_t left = ids_.find(t.substr(0, k));
      const int32_t right = left < 0 ? -1 : ids_.find(t.substr(k));
      if (right >= 0) merges_.set(left, right, {int32_t(id), int32_t(id)});
    }
  }
}

std::string BpeTokenizer::name() const { return name_ + " (" + source_ + ")"; }

// The merged pieces of one encode call: piece -> where its tokens are in `ids`.
struct BpeTokenizer::Scratch {
  static constexpr size_t kMaxPieces = 1 << 16, kMaxBytes = 64;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return size_t(BpeTokenMap::hash(s)); }
  };
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> cached;
  std::vector<int32_t> ids;      // the cached pieces' tokens, one after the other
  std::vector<int32_t> merging;  // the piece being merged
};

std::vector<int32_t> BpeTokenizer::encode(std::string_view text,
                                          const SpecialTokens& special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 16);
  Scratch scratch;
  specials_.split(
      text, special, name(),
      [&](std::string_view s) { encode_stretch(s, s.data() == text.data(), scratch, out); },
      [&](int32_t id) { out.push_back(id); });
  return out;
}

// One stretch between special tokens: cut by the regex (byte-level) or normalized and cut into
// words (SentencePiece); at_start: it begins the text.
void BpeTokenizer::encode_stretch(std::string_view text, bool at_start, Scratch& scratch,
                                  std::vector<int32_t>& out) const {
  if (text.empty()) return;
  auto piece = [&](std::string_view p) { encode_piece(p, scratch, out); };
  if (metaspace_) {
    std::string normalized;
    metaspace_->normalize(text, at_start, normalized);
    if (cut_runs_) return metaspace_->for_each_run(normalized, piece);
    return metaspace_->for_each_word(normalized, piece);
  }
  const std::string composed = nfc_ ? nfc(text) : std::string();
  if (nfc_) text = composed;
  if (!regex_) return encode_piece(text, scratch, out);
  regex_->for_each_piece(text, piece);
}

void BpeTokenizer::encode_piece(std::string_view piece, Scratch& scratch,
                                std::vector<int32_t>& out) const {
  if (whole_piece_first_ || (piece.size() == 1 && !metaspace_)) {
    const int32_t id = ids_.find(piece);
    if (id >= 0) return out.push_back(id);
  }
  const bool cacheable = piece.size() <= Scratch::kMaxBytes;
  if (cacheable) {
    auto it = scratch.cached.find(piece);
    if (it != scratch.cached.end()) {
      const auto first = scratch.ids.begin() + it->second.first;
      return void(out.insert(out.end(), first, first + it->second.second));
    }
  }
  std::vector<int32_t>& ids = scratch.merging;
  if (metaspace_) {
    start_from_chars(piece, ids);
  } else {
    start_from_bytes(piece, ids);
  }
  merges_.apply(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable && scratch.cached.size() < Scratch::kMaxPieces) {
    scratch.cached.emplace(piece, std::pair(uint32_t(scratch.ids.size()), uint32_t(ids.size())));
    scratch.ids.insert(scratch.ids.end(), ids.begin(), ids.end());
  }
}

// Byte-level: a piece starts as its bytes' tokens.
void BpeTokenizer::start_from_bytes(std::string_view piece, std::vector<int32_t>& ids) const {
  ids.resize(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    const auto b = static_cast<unsigned char>(piece[i]);
    ids[i] = byte_ids_[b];
    LOOM_CHECK(ids[i] >= 0, name(), ": byte 0x", std::hex, int(b),
               " has no token, so the text cannot be encoded");
  }
}

// SentencePiece: a word starts as its characters' tokens, the byte fallback or <unk> for the
// others (step 4 of Note [SentencePiece BPE]).
void BpeTokenizer::start_from_chars(std::string_view word, std::vector<int32_t>& ids) const {
  const Metaspace& m = *metaspace_;
  ids.clear();
  bool unk_open = false;  // the last id is an <unk> that the next unknown character may join
  for (size_t i = 0, n = 0; i < word.size(); i += n) {
    n = Metaspace::char_length(word, i);
    const std::string_view c = word.substr(i, n);
    if (const int32_t id = ids_.find(c); id >= 0) {
      ids.push_back(id), unk_open = false;
      continue;
    }
    const bool bytes_known = m.byte_fallback && std::all_of(c.begin(), c.end(), [&](char b) {
                               return fallback_ids_[static_cast<unsigned char>(b)] >= 0;
                             });
    if (bytes_known) {
      for (char b : c) ids.push_back(fallback_ids_[static_cast<unsigned char>(b)]);
      unk_open = false;
      continue;
    }
    LOOM_CHECK(m.unk >= 0, name(), ": the character \"", c, "\" at byte ", i, " of \"", word,
               "\" has no token", m.byte_fallback ? ", no <0xNN> tokens for all its bytes" : "",
               " and the model has no unknown token");
    if (!(unk_open && m.fuse_unk)) ids.push_back(m.unk);
    unk_open = true;
  }
}

std::string_view BpeTokenizer::token_bytes(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < int64_t(bytes_.size()), name(), ": id ", id,
             " is outside the vocabulary [0, ", bytes_.size(), ")");
  return bytes_[size_t(id)];
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= int64_t(bytes_.size()))
      LOOM_FAIL(name(), ": cannot decode id ", id, " at position ", i,
                ": outside the vocabulary [0, ", bytes_.size(), ")");
    LOOM_CHECK(!bytes_[size_t(id)].empty(), name(), ": cannot decode id ", id, " at position ", i,
               ": no token has that id");
    if (!metaspace_) out += bytes_[size_t(id)];
  }
  return metaspace_ ? decode_text(ids) : out;
}

// SentencePiece: "▁" -> " ", <0xNN> -> the byte, the leading spaces cut (Note [SentencePiece BPE]).
std::string BpeTokenizer::decode_text(std::span<const int32_t> ids) const {
  const Metaspace& m = *metaspace_;
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto id = size_t(ids[i]);
    if (m.decode_byte_fallback && fallback_byte_[id] >= 0) {
      out += char(fallback_byte_[id]);
      continue;
    }
    const std::string_view t = bytes_[id];
    const bool drop_marks = m.first_token_unmarked && i == 0;
    for (size_t k = 0; k < t.size();) {
      if (!m.decode_replacement || !t.substr(k).starts_with(m.replacement)) {
        out += t[k++];
        continue;
      }
      if (!drop_marks) out += ' ';
      k += m.replacement.size();
    }
  }
  size_t cut = 0;
  while (cut < size_t(m.strip_leading) && cut < out.size() && out[cut] == ' ') ++cut;
  return out.erase(0, cut);
}

std::vector<int32_t> BpeTokenizer::post_process(std::vector<int32_t> ids) const {
  LOOM_CHECK(single_.unsupported.empty(), name(), ": its post_processor ", single_.unsupported,
             " is not supported (TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel "
             "or a Sequence of them)");
  ids.insert(ids.begin(), single_.before.begin(), single_.before.end());
  ids.insert(ids.end(), single_.after.begin(), single_.after.end());
  return ids;
}

std::optional<int32_t> BpeTokenizer::find_token(std::string_view token) const {
  if (std::optional<int32_t> special = specials_.find(token)) return special;
  const int32_t id = ids_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace loom::data
