// data/text_shards: the two shards concatenate back to the text, the split follows val_fraction
// without cutting a character, its errors name the file and the value; with a BPE tokenizer the
// shards hold its ids of each half; and the KJV corpus of scripts/gpt-corpus.sh when it is there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/text_shards.h"
#include "data/token_shards.h"
#include "support/errors.h"
#include "support/temp_files.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

// Latin accents (2 bytes), CJK (3 bytes), an emoji (4 bytes), a combining mark, NUL and CRLF.
const std::string kMixed =
    "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
    "\xF0\x9F\x99\x82 e\xCC\x81\r\n" +
    std::string(1, '\0') + "end";

}  // namespace

// ---------------------------------------------------------------- text_to_shards

TEST(TextToShards, TheShardsAreTheTextSplitAtValFraction) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i) + ": " + kMixed + "\n";
  loom::test::write_bytes(dir.file("t.txt"), text);
  const std::string out = dir.file("shards");  // created
  TextShards s = text_to_shards(dir.file("t.txt"), out, 0.1);
  EXPECT_EQ(s.train_path, out + "/train_000000.bin");
  EXPECT_EQ(s.val_path, out + "/val_000000.bin");
  std::vector<uint16_t> train = read_token_shard(s.train_path), val = read_token_shard(s.val_path);
  EXPECT_EQ(int64_t(train.size()), s.train_tokens);
  EXPECT_EQ(int64_t(val.size()), s.val_tokens);
  EXPECT_EQ(train.size() + val.size(), text.size());
  EXPECT_NEAR(double(val.size()), 0.1 * double(text.size()), 4.0);  // at most 3 bytes moved
  ByteTokenizer tok;
  EXPECT_EQ(tok.decode(train) + tok.decode(val), text);
  EXPECT_EQ(tok.decode(val), text.substr(text.size() - val.size()));
}

TEST(TextToShards, TheSplitNeverCutsACharacter) {
  TempDir dir;
  // 10 four-byte emoji: any split inside one moves back to its first byte.
  std::string text;
  for (int i = 0; i < 10; ++i) text += "\xF0\x9F\x99\x82";
  loom::test::write_bytes(dir.file("e.txt"), text);
  for (double f : {0.0, 0.05, 0.1, 0.13, 0.26, 0.5, 0.77, 0.9}) {
    SCOPED_TRACE(f);
    TextShards s = text_to_shards(dir.file("e.txt"), dir.path, f);
    EXPECT_EQ(s.val_tokens % 4, 0);
    EXPECT_GE(s.val_tokens, int64_t(std::llround(40 * f)));
    EXPECT_LT(s.val_tokens, int64_t(std::llround(40 * f)) + 4);
    EXPECT_EQ(s.train_tokens + s.val_tokens, 40);
  }
  // val_fraction 0: an empty validation shard, still a valid file.
  TextShards s = text_to_shards(dir.file("e.txt"), dir.path, 0.0);
  EXPECT_TRUE(read_token_shard(s.val_path).empty());
}

TEST(TextToShards, Errors) {
  TempDir dir;
  std::string e = error_of([&] { text_to_shards(dir.file("missing.txt"), dir.path, 0.1); });
  EXPECT_NE(e.find("cannot open " + dir.file("missing.txt")), std::string::npos) << e;
  loom::test::write_bytes(dir.file("empty.txt"), "");
  e = error_of([&] { text_to_shards(dir.file("empty.txt"), dir.path, 0.1); });
  EXPECT_NE(e.find(dir.file("empty.txt") + " is empty"), std::string::npos) << e;
  loom::test::write_bytes(dir.file("a.txt"), "abc");
  e = error_of([&] { text_to_shards(dir.file("a.txt"), dir.path, 1.0); });
  EXPECT_NE(e.find("val_fraction 1 is outside [0, 1)"), std::string::npos) << e;
  e = error_of([&] { text_to_shards(dir.file("a.txt"), dir.path, -0.5); });
  EXPECT_NE(e.find("val_fraction -0.5 is outside [0, 1)"), std::string::npos) << e;
  e = error_of([&] { text_to_shards(dir.file("a.txt"), dir.path, 0.9); });
  EXPECT_NE(e.find(dir.file("a.txt") + " (3 bytes) leaves no training text with val_fraction 0.9"),
            std::string::npos)
      << e;
}

// ---------------------------------------------------------------- the corpus

// The GPT example's corpus: .data/kjv.txt when scripts/gpt-corpus.sh has written it (found
// through $LOOM_SOURCE_DIR, which ctest sets), else written by that script into a temporary
// folder when Debian's bible-kjv is installed (scripts/install-deps.sh); skipped otherwise.
TEST(TextToShards, TheKjvCorpus) {
  const char* src_env = std::getenv("LOOM_SOURCE_DIR");
  if (!src_env || !*src_env) GTEST_SKIP() << "LOOM_SOURCE_DIR is not set (ctest sets it)";
  const std::string src = src_env;
  TempDir dir;
  std::string text = src + "/.data/kjv.txt";
  if (!std::filesystem::exists(text)) {
    if (std::system("command -v bible > /dev/null") != 0)
      GTEST_SKIP() << "no .data/kjv.txt and no 'bible' program: run scripts/install-deps.sh";
    text = dir.file("kjv.txt");
    const std::string cmd = "'" + src + "/scripts/gpt-corpus.sh' '" + text + "' > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  TextShards s = text_to_shards(text, dir.path, 0.1);
  EXPECT_EQ(s.train_tokens + s.val_tokens, int64_t(std::filesystem::file_size(text)));
  EXPECT_GT(s.train_tokens, 4'000'000 * 9 / 10);  // 4.3 MB of text
  EXPECT_NEAR(double(s.val_tokens), 0.1 * double(s.train_tokens + s.val_tokens), 1.0);
  std::vector<uint16_t> train = read_token_shard(s.train_path);
  ByteTokenizer tok;
  EXPECT_EQ(tok.decode(std::span<const uint16_t>(train).first(11)), "\nGenesis 1\n");
  // Plain ASCII English: the 256-byte vocabulary is more than it needs.
  EXPECT_LT(*std::max_element(train.begin(), train.end()), 128);
}

// A BPE tokenizer (the KJV-trained tokenizer.json fixture of scripts/make-tokenizer-fixtures.py):
// each shard holds the tokenizer's ids of its half of the text, special-token text encoded as
// ordinary text, and the two decode back to the text.
TEST(TextToShards, ABpeTokenizersIdsOfEachHalf) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");  // ctest sets it
  const BpeTokenizer tok = BpeTokenizer::from_hf_json(std::string(src && *src ? src : ".") +
                                                      "/tests/data/tokenizers/kjv_bpe.json");
  TempDir dir;
  std::string text;
  for (int i = 0; i < 30; ++i)
    text += "And God said, Let there be light: <|endoftext|> and there was light " +
            std::to_string(i) + ".\n";
  loom::test::write_bytes(dir.file("t.txt"), text);
  TextShards s = text_to_shards(dir.file("t.txt"), dir.path, 0.2, tok);
  std::vector<uint16_t> train = read_token_shard(s.train_path), val = read_token_shard(s.val_path);
  const size_t split = text.size() - size_t(std::llround(0.2 * double(text.size())));
  auto as_ids = [](const std::vector<uint16_t>& v) {
    return std::vector<int32_t>(v.begin(), v.end());
  };
  EXPECT_EQ(as_ids(train), tok.encode_ordinary(std::string_view(text).substr(0, split)));
  EXPECT_EQ(as_ids(val), tok.encode_ordinary(std::string_view(text).substr(split)));
  EXPECT_LT(train.size() + val.size(), text.size() / 2);  // merges: far fewer ids than bytes
  EXPECT_EQ(tok.decode(as_ids(train)) + tok.decode(as_ids(val)), text);
}
