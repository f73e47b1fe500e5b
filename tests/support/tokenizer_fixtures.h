// The tokenizer fixtures of tests/data/tokenizers/ (written by scripts/make-tokenizer-fixtures.py,
// make-sentencepiece-fixtures.py and make-wordpiece-fixtures.py): a file's path under
// LOOM_SOURCE_DIR, and one of the fixtures JSON files read whole. Leaves out: what each test
// checks with them.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace loom::test {

// tests/data/tokenizers/<name> (the folder itself, with a trailing "/", for an empty name).
inline std::string tokenizer_fixture(const std::string& name = "") {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

// The JSON file `name` of that folder; an empty object, and a failed expectation naming the
// file, when it cannot be read.
inline nlohmann::json read_tokenizer_fixtures(const std::string& name) {
  std::ifstream in(tokenizer_fixture(name));
  EXPECT_TRUE(in.good()) << "no " << tokenizer_fixture(name) << " (set LOOM_SOURCE_DIR)";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

}  // namespace loom::test
