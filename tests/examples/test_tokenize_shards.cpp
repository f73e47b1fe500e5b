// examples/tokenize_shards.cpp run as a program: its shards hold the ids the tokenizer gives, split
// at --val-fraction and --shard-tokens; it refuses a vocabulary over uint16 naming its size, and
// special-token text unless told what to do with it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/token_shards.h"
#include "example_program.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::data;
using loom::testing_support::run_command;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

std::vector<int32_t> read_split(const std::string& dir, const char* split, int shards) {
  std::vector<int32_t> ids;
  for (int i = 0; i < shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "/%s_%06d.bin", split, i);
    for (uint16_t t : read_token_shard(dir + name)) ids.push_back(t);
  }
  return ids;
}

}  // namespace

TEST(TokenizeShards, TheShardsHoldTheTokenizersIds) {
  loom::test::TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "And God said, Let there be light: and there was light " + std::to_string(i) + ".\n";
  text += "<|endoftext|>";
  loom::test::write_bytes(dir.file("in.txt"), text);
  const std::string json = fixture("kjv_bpe.json");
  const std::string cmd = std::string(TOKENIZE_SHARDS_BIN) + " --tokenizer " + json + " --input " +
                          dir.file("in.txt") + " --out " + dir.file("out") +
                          " --special allow --val-fraction 0.25 --shard-tokens 300";
  auto r = run_command(cmd, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<int32_t> want =
      BpeTokenizer::from_hf_json(json).encode(text, SpecialTokens::allow());
  ASSERT_EQ(want.back(), 0);  // <|endoftext|>
  const size_t n_val = size_t(double(want.size()) * 0.25 + 0.5);
  const size_t n_train = want.size() - n_val;
  const int train_shards = int((n_train + 299) / 300), val_shards = int((n_val + 299) / 300);
  ASSERT_GT(train_shards, 1);
  std::vector<int32_t> got = read_split(dir.file("out"), "train", train_shards);
  EXPECT_EQ(got.size(), n_train);
  const std::vector<int32_t> val = read_split(dir.file("out"), "val", val_shards);
  EXPECT_EQ(val.size(), n_val);
  got.insert(got.end(), val.begin(), val.end());
  EXPECT_EQ(got, want);
  EXPECT_NE(r.output.find("--vocab-size 1002"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MB/s on one thread"), std::string::npos) << r.output;
}

TEST(TokenizeShards, RefusalsNameTheirReason) {
  loom::test::TempDir dir;
  loom::test::write_bytes(dir.file("in.txt"), "Hello <|endoftext|>");
  const std::string base = std::string(TOKENIZE_SHARDS_BIN) + " --input " + dir.file("in.txt") +
                           " --out " + dir.file("out") + " --tokenizer ";
  auto r = run_command(base + fixture("cl100k_subset.tiktoken") + " --preset cl100k_base", 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("has 100277 ids, but llm.c's .bin shards hold uint16 tokens"),
            std::string::npos)
      << r.output;
  r = run_command(base + fixture("kjv_bpe.json"), 60);  // --special refuse, the default
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("the special token \"<|endoftext|>\" at byte 6, which is not allowed"),
            std::string::npos)
      << r.output;
  r = run_command(base + fixture("kjv_bpe.json") + " --special maybe", 60);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--special"), std::string::npos) << r.output;
}
