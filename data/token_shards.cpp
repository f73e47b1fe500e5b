// Token shard reader (POSIX open/fstat/pread/mmap) and atomic writer. See token_shards.h.
#include "data/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/atomic_file.h"
#include "core/error.h"

namespace loom::data {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; this reader maps them as they are");

namespace {

constexpr int32_t kLlama3Magic = 20240801;  // llm.c's uint32 shards (version 7)

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at offset 0 (retrying short reads and EINTR).
void read_header(int fd, void* dst, size_t n, const std::string& path) {
  char* p = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, p + got, n - got, off_t(got));
    if (r < 0 && errno == EINTR) continue;
    LOOM_CHECK(r >= 0, "token shard ", path, ": cannot read its header: ", std::strerror(errno));
    LOOM_CHECK(r > 0, "token shard ", path, ": the file shrank while its header was read");
    got += size_t(r);
  }
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  LOOM_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()),
             "write_token_shard: ", path, ": ", tokens.size(),
             " tokens do not fit the header's int32 count; split them over several shards");
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = int32_t(tokens.size());
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  out.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  out.commit();
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(f.fd >= 0, "token shard ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  LOOM_CHECK(::fstat(f.fd, &st) == 0, "token shard ", path,
             ": cannot stat: ", std::strerror(errno));
  LOOM_CHECK(S_ISREG(st.st_mode), "token shard ", path, " is not a regular file");
  const int64_t bytes = int64_t(st.st_size);
  LOOM_CHECK(bytes >= kTokenShardHeaderBytes, "token shard ", path, " is truncated: ", bytes,
             " bytes, shorter than the ", kTokenShardHeaderBytes, "-byte header (256 x int32)");

  // Note [Token shard checks] (data/token_shards.h)
  int32_t header[kTokenShardHeaderInts];
  read_header(f.fd, header, sizeof header, path);
  LOOM_CHECK(header[0] != kLlama3Magic, "token shard ", path, " has magic ", header[0],
             ": llm.c's Llama 3 format (uint32 tokens, version ", header[1],
             "), which loom does not read; it reads GPT-2 shards (magic ", kTokenShardMagic,
             ", uint16 tokens)");
  LOOM_CHECK(header[0] == kTokenShardMagic, "token shard ", path, " has a bad magic number ",
             header[0], " (expected ", kTokenShardMagic,
             ": not a token shard of llm.c's / nanoGPT's format)");
  LOOM_CHECK(header[1] == kTokenShardVersion, "token shard ", path, " has version ", header[1],
             " (expected ", kTokenShardVersion, ": uint16 tokens)");
  const int64_t count = header[2];
  LOOM_CHECK(count >= 0, "token shard ", path, " declares an absurd token count ", count,
             " (negative)");
  const int64_t want = kTokenShardHeaderBytes + 2 * count;
  LOOM_CHECK(bytes >= want, "token shard ", path, " is truncated: its header declares ", count,
             " tokens (", want, " bytes with the header) but the file has ", bytes, " bytes (",
             (bytes - kTokenShardHeaderBytes) / 2, " tokens)");
  LOOM_CHECK(bytes == want, "token shard ", path, " has ", bytes - want, " bytes after the ", count,
             " tokens its header declares (not a token shard, or two concatenated)");

  count_ = count;
  if (count == 0) return;  // nothing to map
  map_bytes_ = size_t(bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    LOOM_FAIL("token shard ", path, ": cannot map its ", bytes, " bytes: ", std::strerror(errno));
  }
  tokens_ =
      reinterpret_cast<const uint16_t*>(static_cast<const char*>(map_) + kTokenShardHeaderBytes);
}

void TokenShard::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
  count_ = 0;
}

TokenShard::~TokenShard() { release(); }

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      count_(std::exchange(other.count_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

std::vector<uint16_t> read_token_shard(const std::string& path) {
  TokenShard shard(path);
  std::span<const uint16_t> t = shard.tokens();
  return {t.begin(), t.end()};
}

}  // namespace loom::data
