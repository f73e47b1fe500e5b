// data/token_shards: the .bin shard format byte for byte (header of 256 int32, uint16 tokens),
// round trips through write_token_shard / read_token_shard / TokenShard, and each bad input of
// Note [Token shard checks] (data/token_shards.h) with its error naming the file and the value.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/token_shards.h"
#include "support/errors.h"
#include "support/temp_files.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

// A shard's bytes written by hand: the header ints given (the rest zero), then `tokens`.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count,
                        const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string b(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  b.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return b;
}

std::vector<uint16_t> some_tokens(size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t((i * 40503u + 7u) % 65536u);
  return t;
}

}  // namespace

TEST(TokenShards, WritesLlmcsLayoutByteForByte) {
  TempDir dir;
  const std::vector<uint16_t> tokens{0, 1, 50256, 65535, 258};
  write_token_shard(dir.file("a.bin"), tokens);
  const std::string got = loom::test::read_bytes(dir.file("a.bin"));
  EXPECT_EQ(got, shard_bytes(20240520, 1, 5, tokens));
  ASSERT_EQ(got.size(), 1024u + 10u);
  // Little-endian, as numpy's tofile writes on x86: 20240520 = 0x0134D888.
  EXPECT_EQ(static_cast<unsigned char>(got[0]), 0x88);
  EXPECT_EQ(static_cast<unsigned char>(got[3]), 0x01);
  EXPECT_EQ(static_cast<unsigned char>(got[1024 + 6]), 0xFF);  // 65535
  // Atomic: nothing but the shard is left in the folder.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) files += e.exists();
  EXPECT_EQ(files, 1);
}

TEST(TokenShards, RoundTrip) {
  TempDir dir;
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(1000), size_t(300001)}) {
    SCOPED_TRACE(n);
    const std::vector<uint16_t> tokens = some_tokens(n);
    const std::string path = dir.file("s" + std::to_string(n) + ".bin");
    write_token_shard(path, tokens);
    EXPECT_EQ(read_token_shard(path), tokens);
    TokenShard mapped(path);
    EXPECT_EQ(mapped.size(), int64_t(n));
    EXPECT_EQ(mapped.path(), path);
    EXPECT_EQ(std::vector<uint16_t>(mapped.tokens().begin(), mapped.tokens().end()), tokens);
  }
}

TEST(TokenShards, ReadsAHandWrittenShardAndIgnoresTheSpareHeaderInts) {
  TempDir dir;
  std::string b = shard_bytes(20240520, 1, 3, {7, 8, 9});
  b[4 * 200] = 42;  // header[200]: unused by the format
  loom::test::write_bytes(dir.file("h.bin"), b);
  EXPECT_EQ(read_token_shard(dir.file("h.bin")), (std::vector<uint16_t>{7, 8, 9}));
}

TEST(TokenShards, OverwritesAndMovesKeepTheMapping) {
  TempDir dir;
  const std::string path = dir.file("o.bin");
  write_token_shard(path, some_tokens(10));
  TokenShard a(path);
  write_token_shard(path, std::vector<uint16_t>{1, 2});  // the rename leaves a's mapping intact
  EXPECT_EQ(read_token_shard(path), (std::vector<uint16_t>{1, 2}));
  TokenShard b(std::move(a));
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(b.tokens()[9], some_tokens(10)[9]);
  TokenShard c(path);
  c = std::move(b);
  EXPECT_EQ(c.size(), 10);
  EXPECT_EQ(c.tokens()[3], some_tokens(10)[3]);
}

// ---------------------------------------------------------------- bad input

TEST(TokenShards, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("nope.bin");
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("No such file"), std::string::npos) << e;
}

TEST(TokenShards, ShorterThanTheHeader) {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  loom::test::write_bytes(path, shard_bytes(20240520, 1, 0, {}).substr(0, 1000));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("truncated: 1000 bytes, shorter than the 1024-byte header"), std::string::npos)
      << e;
}

TEST(TokenShards, WrongMagic) {
  TempDir dir;
  const std::string path = dir.file("magic.bin");
  loom::test::write_bytes(path, shard_bytes(20240521, 1, 2, {1, 2}));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("bad magic number 20240521 (expected 20240520"), std::string::npos) << e;
}

TEST(TokenShards, Llama3ShardsAreNamed) {
  TempDir dir;
  const std::string path = dir.file("llama.bin");
  loom::test::write_bytes(path, shard_bytes(20240801, 7, 1, {1, 0}));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("magic 20240801: llm.c's Llama 3 format (uint32 tokens, version 7)"),
            std::string::npos)
      << e;
}

TEST(TokenShards, WrongVersion) {
  TempDir dir;
  const std::string path = dir.file("version.bin");
  loom::test::write_bytes(path, shard_bytes(20240520, 2, 2, {1, 2}));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("has version 2 (expected 1"), std::string::npos) << e;
}

TEST(TokenShards, AbsurdCount) {
  TempDir dir;
  const std::string path = dir.file("absurd.bin");
  loom::test::write_bytes(path, shard_bytes(20240520, 1, -5, {1, 2}));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("absurd token count -5"), std::string::npos) << e;
}

TEST(TokenShards, TruncatedData) {
  TempDir dir;
  const std::string path = dir.file("trunc.bin");
  loom::test::write_bytes(path, shard_bytes(20240520, 1, 100, some_tokens(60)));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("truncated: its header declares 100 tokens (1224 bytes with the header) but "
                   "the file has 1144 bytes (60 tokens)"),
            std::string::npos)
      << e;
  // A huge count in a small file is refused before anything of that size is mapped.
  loom::test::write_bytes(path, shard_bytes(20240520, 1, 2000000000, some_tokens(3)));
  e = error_of([&] { TokenShard s(path); });
  EXPECT_NE(e.find("declares 2000000000 tokens"), std::string::npos) << e;
}

TEST(TokenShards, TrailingBytes) {
  TempDir dir;
  const std::string path = dir.file("trail.bin");
  loom::test::write_bytes(path, shard_bytes(20240520, 1, 2, some_tokens(3)));
  std::string e = error_of([&] { read_token_shard(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("has 2 bytes after the 2 tokens its header declares"), std::string::npos) << e;
}

TEST(TokenShards, AFolderIsNotAShard) {
  TempDir dir;
  std::string e = error_of([&] { read_token_shard(dir.path); });
  EXPECT_NE(e.find(dir.path + " is not a regular file"), std::string::npos) << e;
}
