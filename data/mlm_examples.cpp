// Documents from text and their packing into BERT examples (data/mlm_examples.h, Note [Packing
// lines]). Leaves out: threads (encoding the whole KJV text is a second or two on one core).
#include "data/mlm_examples.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace loom::data {

namespace {

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\v\f");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\v\f") - b + 1);
}

// Calls fn(line, number from 1) for each line of `text` ('\n' ends a line).
template <typename F>
void for_each_line(std::string_view text, const F& fn) {
  size_t start = 0;
  for (int64_t number = 1; start < text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    fn(text.substr(start, end - start), number);
    start = end + 1;
  }
}

// A chunk of Note [Packing lines]: whole lines or pieces of one, in order.
struct Chunk {
  std::vector<std::span<const int32_t>> lines;
  size_t tokens = 0;
};

std::vector<int32_t> joined(std::span<const std::span<const int32_t>> lines) {
  std::vector<int32_t> out;
  for (std::span<const int32_t> l : lines) out.insert(out.end(), l.begin(), l.end());
  return out;
}

BertInput example_of(const Chunk& c, int32_t cls, int32_t sep, bool pairs) {
  const std::span<const std::span<const int32_t>> lines(c.lines);
  if (!pairs) return bert_input(joined(lines), cls, sep);
  if (lines.size() == 1) {  // one line: cut at its middle token
    const std::span<const int32_t> l = lines[0];
    const size_t half = (l.size() + 1) / 2;
    return bert_input(l.first(half), l.subspan(half), cls, sep);
  }
  size_t best = 1, before = 0, best_gap = SIZE_MAX;
  for (size_t k = 1; k < lines.size(); ++k) {  // A = lines [0, k)
    before += lines[k - 1].size();
    const size_t gap = 2 * before > c.tokens ? 2 * before - c.tokens : c.tokens - 2 * before;
    if (gap < best_gap) best = k, best_gap = gap;
  }
  return bert_input(joined(lines.first(best)), joined(lines.subspan(best)), cls, sep);
}

}  // namespace

Documents documents_from_text(std::string_view text) {
  Documents docs(1);
  for_each_line(text, [&](std::string_view line, int64_t) {
    const std::string_view t = trimmed(line);
    if (t.empty()) {
      if (!docs.back().empty()) docs.emplace_back();
    } else {
      docs.back().emplace_back(t);
    }
  });
  if (docs.back().empty()) docs.pop_back();
  return docs;
}

Documents kjv_chapters(std::string_view text) {
  Documents docs;
  for_each_line(text, [&](std::string_view line, int64_t number) {
    if (trimmed(line).empty()) return;
    if (line[0] != ' ' && line[0] != '\t') {  // "Genesis 1": a chapter begins
      docs.emplace_back();
      return;
    }
    const std::string_view t = trimmed(line);  // "1 In the beginning ..."
    size_t digits = 0;
    while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
    LOOM_CHECK(digits > 0 && digits < t.size() && t[digits] == ' ' && !docs.empty(),
               "kjv_chapters: line ", number, " (\"", line.substr(0, 40),
               "\") is neither a chapter heading, a numbered verse nor blank");
    docs.back().emplace_back(trimmed(t.substr(digits)));
  });
  return docs;
}

std::vector<BertInput> pack_encoded(std::span<const std::vector<std::vector<int32_t>>> documents,
                                    int32_t cls_id, int32_t sep_id, const PackOptions& options) {
  const int64_t room = options.max_length - (options.pairs ? 3 : 2);
  LOOM_CHECK(room >= 1, "pack_documents: max_length ", options.max_length,
             " leaves no room for a token beside [CLS] and the [SEP]",
             options.pairs ? "s of a pair" : "");
  const size_t budget = size_t(room);
  std::vector<BertInput> out;
  for (const std::vector<std::vector<int32_t>>& doc : documents) {
    Chunk cur;
    auto flush = [&] {
      if (cur.tokens > 0) out.push_back(example_of(cur, cls_id, sep_id, options.pairs));
      cur = Chunk();
    };
    for (const std::vector<int32_t>& line : doc) {
      std::span<const int32_t> rest(line);
      if (rest.empty()) continue;
      if (cur.tokens + rest.size() > budget) flush();
      while (rest.size() > budget) {  // a line longer than a chunk: pieces of it alone
        cur.lines.push_back(rest.first(budget)), cur.tokens = budget;
        flush();
        rest = rest.subspan(budget);
      }
      cur.lines.push_back(rest), cur.tokens += rest.size();
    }
    flush();
  }
  return out;
}

std::vector<BertInput> pack_documents(const Tokenizer& tokenizer, const Documents& documents,
                                      int32_t cls_id, int32_t sep_id, const PackOptions& options) {
  std::vector<std::vector<std::vector<int32_t>>> encoded(documents.size());
  for (size_t d = 0; d < documents.size(); ++d)
    for (const std::string& line : documents[d])
      encoded[d].push_back(tokenizer.encode(line, options.special));
  return pack_encoded(encoded, cls_id, sep_id, options);
}

}  // namespace loom::data
