// data/byte_tokenizer: bytes in, bytes out (ASCII, multi-byte UTF-8, every byte value), and
// text_to_shards: the two shards concatenate back to the text, the split follows val_fraction
// without cutting a character, its errors name the file and the value; and the KJV corpus of
// scripts/gpt-corpus.sh when it is there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/token_shards.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error";
  return "";
}

// Latin accents (2 bytes), CJK (3 bytes), an emoji (4 bytes), a combining mark, NUL and CRLF.
const std::string kMixed =
    "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
    "\xF0\x9F\x99\x82 e\xCC\x81\r\n" +
    std::string(1, '\0') + "end";

}  // namespace

TEST(ByteTokenizer, EncodesEachByteAsItsValue) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.encode("Ab"), (std::vector<uint16_t>{65, 98}));
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<uint16_t>{195, 169}));  // é: two tokens
  EXPECT_EQ(tok.encode("\xF0\x9F\x99\x82"), (std::vector<uint16_t>{240, 159, 153, 130}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizer, RoundTripsUtf8AndEveryByte) {
  ByteTokenizer tok;
  std::vector<uint16_t> ids = tok.encode(kMixed);
  EXPECT_EQ(ids.size(), kMixed.size());
  EXPECT_EQ(tok.decode(ids), kMixed);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  ids = tok.encode(all);
  for (int b = 0; b < 256; ++b) ASSERT_EQ(ids[size_t(b)], b);
  EXPECT_EQ(tok.decode(ids), all);
  // Token by token (as a sampler prints them), the pieces concatenate to the text.
  std::string streamed;
  for (uint16_t id : tok.encode(kMixed)) streamed += tok.decode(std::vector<uint16_t>{id});
  EXPECT_EQ(streamed, kMixed);
}

TEST(ByteTokenizer, DecodeRefusesIdsOutsideTheBytes) {
  ByteTokenizer tok;
  std::string e = error_of([&] { tok.decode(std::vector<uint16_t>{104, 105, 256}); });
  EXPECT_NE(e.find("token 256 at position 2 is outside the byte vocabulary [0, 256)"),
            std::string::npos)
      << e;
}

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
