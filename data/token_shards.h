// Token shards: the .bin files llm.c's and nanoGPT's GPT-2 data scripts write (a 256 x int32
// little-endian header: magic 20240520, version 1, token count; then the tokens as uint16), read
// through a read-only mmap and written atomically. Leaves out: llm.c's uint32 format (magic
// 20240801, version 7, for Llama 3; refused with a message saying so) and tokenizing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace loom::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;  // 1024

// Writes `tokens` as a shard at `path` through core/atomic_file.h: a crash leaves the previous
// file or the whole new one. The count must fit the header's int32 (error names path and count).
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

// Note [Token shard checks]
// Opening a shard checks, each error naming the file and the value: the file is at least the
// 1024-byte header; header[0] is 20240520 (llm.c's Llama 3 shards, 20240801, are named as such);
// header[1] is 1; header[2], the count, is not negative (absurd); the file is exactly 1024 + 2 x
// count bytes (shorter: truncated; longer: trailing bytes, not a shard or two concatenated). The
// count is compared with the file's size before anything is mapped or allocated, so a corrupt
// header cannot ask for gigabytes. Token ids against a vocabulary are checked one level up
// (data/token_dataset.h), where the vocabulary is known.

// One shard mapped read-only (Note [Token shard checks] on open). Move-only; unmaps on
// destruction. The tokens stay valid while the object lives.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }  // tokens
  std::span<const uint16_t> tokens() const { return {tokens_, size_t(count_)}; }

 private:
  void release();
  std::string path_;
  void* map_ = nullptr;  // the whole file, header included
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t count_ = 0;
};

// The tokens of the shard at `path`, copied out (Note [Token shard checks]).
std::vector<uint16_t> read_token_shard(const std::string& path);

}  // namespace loom::data
