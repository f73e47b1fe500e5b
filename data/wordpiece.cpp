// WordPieceTokenizer (data/wordpiece.h): the lookup tables built from a WordPieceModel, encode
// (Note [WordPiece encoding]), decode (Note [WordPiece decoding]) and BERT's inputs.
// Leaves out: a cache of encoded words (two thirds of encoding the KJV text is decoding,
// normalizing and pre-tokenizing it, docs/tokenizers.md).
#include "data/wordpiece.h"

#include <algorithm>

#include "core/error.h"
#include "data/unicode_text.h"
#include "data/wordpiece_files.h"

namespace loom::data {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// `tokenizers`' WordPiece decoder's cleanup, on one token with its joining space.
void cleanup(std::string& token) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_all(token, from, to);
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_hf_json(const std::string& path) {
  return WordPieceTokenizer(read_hf_wordpiece_json(path));
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_txt(const std::string& path,
                                                      const BertNormalizerOptions& normalizer) {
  return WordPieceTokenizer(read_wordpiece_vocab_txt(path, normalizer));
}

WordPieceTokenizer::WordPieceTokenizer(WordPieceModel model) : model_(std::move(model)) {
  std::vector<std::pair<std::string, int32_t>> vocab = std::move(model_.vocab);
  model_.vocab.clear();
  for (auto& [text, id] : vocab) {
    LOOM_CHECK(id >= 0, name(), ": token \"", text, "\" has id ", id, " (ids are >= 0)");
    start_[text] = id;  // a text given twice: the later id wins
  }
  auto place = [&](const std::string& text, int32_t id) {
    if (size_t(id) >= tokens_.size())
      tokens_.resize(size_t(id) + 1), has_token_.resize(tokens_.size());
    tokens_[size_t(id)] = text;
    has_token_[size_t(id)] = 1;
  };
  for (const auto& [text, id] : start_) place(text, id);
  const std::string& prefix = model_.continuing_subword_prefix;
  for (const auto& [text, id] : start_)
    if (text.starts_with(prefix)) continuation_.emplace(text.substr(prefix.size()), id);
  for (const auto& [text, id] : model_.specials) {
    LOOM_CHECK(!text.empty() && id >= 0, name(), ": special token \"", text, "\" with id ", id,
               " (a special token needs text and an id >= 0)");
    LOOM_CHECK(
        size_t(id) >= tokens_.size() || !has_token_[size_t(id)] || tokens_[size_t(id)] == text,
        name(), ": special token \"", text, "\" has id ", id, ", which is the token \"",
        size_t(id) < tokens_.size() ? tokens_[size_t(id)] : "", "\"");
    place(text, id);
  }
  specials_ = SpecialTokenMatcher(model_.specials, name());
  auto unk = start_.find(model_.unk_token);
  LOOM_CHECK(unk != start_.end(), name(), ": the unknown token \"", model_.unk_token,
             "\" is not in the vocabulary");
  unk_id_ = unk->second;
  LOOM_CHECK(model_.max_input_chars_per_word >= 1, name(), ": max_input_chars_per_word ",
             model_.max_input_chars_per_word, " must be at least 1");
}

std::string WordPieceTokenizer::name() const { return model_.name + " (" + model_.source + ")"; }

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text,
                                                const SpecialTokens& special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 16);
  specials_.split(
      text, special, name(), [&](std::string_view s) { encode_stretch(s, out); },
      [&](int32_t id) { out.push_back(id); });
  return out;
}

void WordPieceTokenizer::encode_stretch(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::u32string chars, normalized;
  decode_utf8(text, chars);
  if (model_.normalizer) bert_normalize(chars, *model_.normalizer, normalized);
  const std::u32string& in = model_.normalizer ? normalized : chars;
  std::vector<std::u32string_view> words;
  bert_pre_tokenize(in, words);
  std::string utf8;
  std::vector<size_t> ends;
  for (std::u32string_view word : words) encode_word(word, utf8, ends, out);
}

// Note [WordPiece encoding], step 3. `ends[k]` is the byte offset where character k ends, so the
// pieces tried are whole characters, longest first.
void WordPieceTokenizer::encode_word(std::u32string_view word, std::string& utf8,
                                     std::vector<size_t>& ends, std::vector<int32_t>& out) const {
  if (int64_t(word.size()) > model_.max_input_chars_per_word) return out.push_back(unk_id_);
  utf8.clear(), ends.clear();
  for (char32_t c : word) append_utf8(c, utf8), ends.push_back(utf8.size());
  const size_t first = out.size();
  size_t start = 0, start_char = 0;  // in bytes and in characters
  while (start < utf8.size()) {
    const Map& table = start == 0 ? start_ : continuation_;
    int32_t id = -1;
    size_t end_char = word.size();
    for (; end_char > start_char; --end_char) {
      auto it = table.find(std::string_view(utf8).substr(start, ends[end_char - 1] - start));
      if (it != table.end()) {
        id = it->second;
        break;
      }
    }
    if (id < 0) {  // no token fits here: the whole word is unknown
      out.resize(first);
      return out.push_back(unk_id_);
    }
    out.push_back(id);
    start = ends[end_char - 1], start_char = end_char;
  }
}

std::string_view WordPieceTokenizer::token_text(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < int64_t(tokens_.size()), name(), ": id ", id,
             " is outside the vocabulary [0, ", tokens_.size(), ")");
  LOOM_CHECK(has_token_[size_t(id)], name(), ": no token has id ", id);
  return tokens_[size_t(id)];
}

std::string WordPieceTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<int32_t> specials = skip_special ? special_ids() : std::vector<int32_t>();
  std::string out, token;
  size_t kept = 0;  // tokens written so far (the first gets no space)
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= int64_t(tokens_.size()))
      LOOM_FAIL(name(), ": cannot decode id ", id, " at position ", i,
                ": outside the vocabulary [0, ", tokens_.size(), ")");
    LOOM_CHECK(has_token_[size_t(id)], name(), ": cannot decode id ", id, " at position ", i,
               ": no token has that id");
    if (skip_special && std::binary_search(specials.begin(), specials.end(), id)) continue;
    token = tokens_[size_t(id)];
    if (!model_.wordpiece_decoder) {
      if (kept++ > 0) out += ' ';
      out += token;
      continue;
    }
    if (kept++ > 0) {
      if (token.starts_with(model_.decoder_prefix))
        token.erase(0, model_.decoder_prefix.size());
      else
        token.insert(0, 1, ' ');
    }
    if (model_.decoder_cleanup) cleanup(token);
    out += token;
  }
  return out;
}

std::optional<int32_t> WordPieceTokenizer::find_token(std::string_view token) const {
  if (std::optional<int32_t> special = specials_.find(token)) return special;
  auto it = start_.find(token);
  if (it == start_.end()) return std::nullopt;
  return it->second;
}

std::vector<int32_t> WordPieceTokenizer::special_ids() const {
  std::vector<int32_t> ids;
  for (const auto& [text, id] : specials_.tokens()) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> WordPieceTokenizer::post_process(std::vector<int32_t> ids) const {
  ids.insert(ids.begin(), cls_id());
  ids.push_back(sep_id());
  return ids;
}

BertInput WordPieceTokenizer::encode_single(std::string_view a, int64_t max_length,
                                            const SpecialTokens& special) const {
  return bert_input(encode(a, special), cls_id(), sep_id(), max_length);
}

BertInput WordPieceTokenizer::encode_pair(std::string_view a, std::string_view b,
                                          int64_t max_length, const SpecialTokens& special) const {
  return bert_input(encode(a, special), encode(b, special), cls_id(), sep_id(), max_length);
}

}  // namespace loom::data
