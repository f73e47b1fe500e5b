// What the two tokenizer.json readers share (data/hf_tokenizer_json.cpp for BPE,
// data/wordpiece_files.cpp for WordPiece): a JSON value shortened for a message, a whole file
// parsed, an added_tokens entry checked. Templated on the JSON type, so that nlohmann-json stays
// inside those .cpp files. Leaves out: everything particular to one model.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/error.h"

namespace loom::data::json_checks {

// The value as JSON text, cut to 80 characters.
template <typename Json>
std::string shown(const Json& j) {
  std::string s = j.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// The document in `path`; errors name `what` ("tokenizer.json") and the path.
template <typename Json>
Json parse_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), what, " ", path, ": cannot open it: ", std::strerror(errno));
  try {
    return Json::parse(in);
  } catch (const typename Json::exception& e) {
    LOOM_FAIL(what, " ", path, ": not valid JSON: ", e.what());
  }
}

// Entry t = added_tokens[i] of the tokenizer.json `path`: its content and id. An error unless it
// has both (a non-empty string; an id in [0, 2^22)) and none of the `refused` flags is true.
template <typename Json>
std::pair<std::string, int32_t> added_token(const Json& t, const std::string& path, size_t i,
                                            std::initializer_list<const char*> refused) {
  constexpr int64_t kMaxId = 1 << 22;
  LOOM_CHECK(
      t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
          t["content"].is_string() && !t["content"].template get<std::string>().empty(),
      "tokenizer.json ", path, ": added_tokens[", i, "] ", shown(t), " has no id or content");
  std::string content = t["content"].template get<std::string>();
  for (const char* key : refused)
    LOOM_CHECK(!t.value(key, false), "tokenizer.json ", path, ": added_tokens[", i, "] (", content,
               "): ", key, " true is not supported");
  const int64_t id = t["id"].template get<int64_t>();
  LOOM_CHECK(id >= 0 && id < kMaxId, "tokenizer.json ", path, ": added_tokens[", i, "] (", content,
             "): id ", id, " is outside [0, ", kMaxId, ")");
  return {std::move(content), int32_t(id)};
}

}  // namespace loom::data::json_checks
