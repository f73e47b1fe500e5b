// Training checkpoints on top of safetensors: naming, metadata, whole-file checksum, keep-last-K,
// fallback.
#include "nn/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string_view>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/out_of_memory.h"
#include "nn/serialize.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSections[] = {"model.", "optim.", "scaler."};

std::string checkpoint_name(int64_t number) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%08lld.safetensors", static_cast<long long>(number));
  return buf;
}

// Parses all of `s` as an unsigned / signed decimal integer.
template <typename T>
bool parse_int(const std::string& s, T& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// "ckpt-<digits>.safetensors" -> number; -1 for any other name.
int64_t parse_checkpoint_name(const std::string& name) {
  const std::string head = "ckpt-", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  int64_t n = -1;
  return parse_int(digits, n) ? n : -1;
}

// Note [Checkpoint integrity]
// safetensors has no checksum, and a reader that checks only the data misses a changed byte in
// the JSON header (a shape, an offset, a dtype) or in the metadata (epoch, step, RNG state). So
// the CRC-32C covers the whole file, every byte: it is written into the header's metadata as
// "loom_crc32c": "<8 lowercase hex digits>", computed over the file with those 8 digits set to
// '0'. The reader finds that one field in the raw header bytes, zeroes its digits and recomputes.
// A changed byte anywhere is then caught: in the digits (they no longer match), in the key (the
// field is missing), anywhere else (CRC-32C detects every error burst of up to 32 bits), and
// before the CRC is even checked when it breaks the JSON or the length prefix. The file stays a
// plain safetensors file (nothing is appended), so Python's safetensors still reads it.
constexpr char kCrcField[] = "\"loom_crc32c\":\"";
constexpr size_t kCrcDigits = 8;

std::string hex8(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The offset of the CRC digits in `bytes` (a whole file): the one place where the field appears
// inside the header; npos when it does not appear exactly once.
size_t find_crc_digits(std::string_view bytes) {
  if (bytes.size() < 8) return std::string::npos;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  size_t end = size_t(std::min<uint64_t>(bytes.size(), 8 + std::min<uint64_t>(n, bytes.size())));
  size_t at = bytes.find(kCrcField, 8);
  if (at == std::string::npos || at + sizeof(kCrcField) - 1 + kCrcDigits > end)
    return std::string::npos;
  if (bytes.find(kCrcField, at + 1) < end) return std::string::npos;
  return at + sizeof(kCrcField) - 1;
}

// CRC-32C of the file with its CRC digits read as zeros.
uint32_t whole_file_crc(std::string_view bytes, size_t digits_at) {
  static const char zeros[kCrcDigits] = {'0', '0', '0', '0', '0', '0', '0', '0'};
  uint32_t crc = crc32c(bytes.data(), digits_at);
  crc = crc32c(zeros, kCrcDigits, crc);
  return crc32c(bytes.data() + digits_at + kCrcDigits, bytes.size() - digits_at - kCrcDigits, crc);
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "checkpoint '", path, "': cannot open: ", std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOOM_CHECK(!in.bad(), "checkpoint '", path, "': read failed: ", std::strerror(errno));
  return bytes;
}

// Removes "ckpt-*.safetensors.tmp.<pid>" files whose writer process no longer exists.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || parse_checkpoint_name(name.substr(0, at)) < 0) continue;
    long pid = 0;
    if (!parse_int(name.substr(at + 5), pid) || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
}

}  // namespace

int64_t TrainingState::extra_int(const std::string& key) const {
  std::string where =
      source.empty() ? std::string("training state") : "checkpoint '" + source + "'";
  auto it = extra.find(key);
  LOOM_CHECK(it != extra.end(), where, ": no extra entry '", key, "'");
  int64_t v = 0;
  LOOM_CHECK(parse_int(it->second, v), where, ": extra entry '", key, "' is not an integer: '",
             it->second, "'");
  return v;
}

std::string save_checkpoint(const std::string& dir, int64_t number, const TrainingState& state,
                            int keep_last) {
  LOOM_CHECK(number >= 0, "save_checkpoint: the checkpoint number must be >= 0, got ", number);
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK(!ec, "save_checkpoint: cannot create folder '", dir, "': ", ec.message());
  std::string path = (fs::path(dir) / checkpoint_name(number)).string();

  NamedTensors host;
  const NamedTensors* parts[] = {&state.model, &state.optimizer, &state.scaler};
  for (int s = 0; s < 3; ++s)
    for (const auto& [name, t] : *parts[s]) {
      LOOM_CHECK(t.defined(), "save_checkpoint '", path, "': tensor '", kSections[s], name,
                 "' is undefined");
      host.emplace_back(kSections[s] + name, to_host_contiguous(t));
    }

  StringMap meta;
  meta["loom_checkpoint_format"] = std::to_string(kCheckpointFormat);
  meta["loom_version"] = LOOM_VERSION;
  meta["loom_crc32c"] = std::string(kCrcDigits, '0');  // patched below: Note [Checkpoint integrity]
  for (const auto& [k, v] : state.extra) meta["extra." + k] = v;
  auto rng = state.rng;
  if (!rng.count("default")) rng["default"] = default_generator().state();
  for (const auto& [name, g] : rng) {
    meta["rng." + name + ".seed"] = std::to_string(g.seed);
    meta["rng." + name + ".offset"] = std::to_string(g.offset);
  }
  std::string bytes = encode_safetensors(host, meta, path);
  size_t digits_at = find_crc_digits(bytes);
  LOOM_CHECK(digits_at != std::string::npos, "save_checkpoint '", path,
             "': the loom_crc32c field must appear once in the header (does a name or metadata key "
             "contain it?)");
  bytes.replace(digits_at, kCrcDigits, hex8(whole_file_crc(bytes, digits_at)));
  {
    AtomicFileWriter out(path);  // a failed write leaves the previous checkpoints as they were
    out.write(bytes.data(), bytes.size());
    out.commit();
  }

  if (keep_last > 0) {
    auto all = list_checkpoints(dir);
    int64_t extra_files = int64_t(all.size()) - keep_last;
    for (int64_t i = 0; i < extra_files; ++i)
      if (all[size_t(i)].second != path) fs::remove(all[size_t(i)].second, ec);
  }
  remove_stale_temporaries(dir);
  return path;
}

TrainingState load_checkpoint(const std::string& path) {
  std::string bytes = read_whole_file(path);
  return load_checkpoint_bytes(bytes.data(), bytes.size(), path);
}

TrainingState load_checkpoint_bytes(const void* data, size_t n, const std::string& path) {
  std::string where = "checkpoint '" + path + "'";
  std::string_view bytes(static_cast<const char*>(data), n);
  SafetensorsFile f = read_safetensors(data, n, path);
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = f.metadata.find(key);
    LOOM_CHECK(
        it != f.metadata.end(), where, ": metadata has no '", key,
        "' (not a loom checkpoint, a corrupt one, or one written by another format version)");
    return it->second;
  };
  LOOM_CHECK(meta("loom_checkpoint_format") == std::to_string(kCheckpointFormat), where,
             ": format version '", meta("loom_checkpoint_format"), "', this loom reads version ",
             kCheckpointFormat);
  const std::string& stored = meta("loom_crc32c");
  bool hex = stored.size() == kCrcDigits && std::all_of(stored.begin(), stored.end(), [](char c) {
               return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
             });
  LOOM_CHECK(hex, where, ": bad loom_crc32c '", stored,
             "' (expected 8 lowercase hex digits): the file is corrupt");
  size_t digits_at = find_crc_digits(bytes);
  LOOM_CHECK(digits_at != std::string::npos && bytes.compare(digits_at, kCrcDigits, stored) == 0,
             where,
             ": the loom_crc32c field is not where it belongs in the header: the file is corrupt");
  std::string actual = hex8(whole_file_crc(bytes, digits_at));
  LOOM_CHECK(stored == actual, where, ": checksum mismatch (stored ", stored, ", computed ", actual,
             "): the file is corrupt (a byte of its header, metadata or data changed)");

  TrainingState st;
  st.source = path;
  st.loom_version = meta("loom_version");
  NamedTensors* parts[] = {&st.model, &st.optimizer, &st.scaler};
  for (auto& [name, t] : f.tensors) {
    bool placed = false;
    for (int s = 0; s < 3 && !placed; ++s) {
      std::string p = kSections[s];
      if (name.compare(0, p.size(), p) == 0) {
        parts[s]->emplace_back(name.substr(p.size()), t);
        placed = true;
      }
    }
    LOOM_CHECK(placed, where, ": unexpected tensor '", name,
               "' (names start with model., optim. or scaler.)");
  }
  for (const auto& [key, value] : f.metadata) {
    if (key.compare(0, 6, "extra.") == 0) {
      st.extra[key.substr(6)] = value;
    } else if (key.compare(0, 4, "rng.") == 0) {
      size_t dot = key.rfind('.');
      std::string name = key.substr(4, dot - 4), field = key.substr(dot + 1);
      LOOM_CHECK(dot > 4 && (field == "seed" || field == "offset"), where,
                 ": bad rng metadata key '", key, "'");
      uint64_t v = 0;
      LOOM_CHECK(parse_int(value, v), where, ": rng metadata '", key,
                 "' is not an unsigned integer: '", value, "'");
      (field == "seed" ? st.rng[name].seed : st.rng[name].offset) = v;
    }
  }
  return st;
}

void restore_default_rng(const TrainingState& state) {
  auto it = state.rng.find("default");
  if (it != state.rng.end()) default_generator().set_state(it->second);
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t n = parse_checkpoint_name(entry.path().filename().string());
    if (n >= 0) out.emplace_back(n, entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<TrainingState> load_latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      return load_checkpoint(it->second);
    } catch (const OutOfMemoryError&) {
      throw;  // the file is fine: the run does not fit, and must not start anew over it
    } catch (const Error& e) {
      std::cerr << "loom: warning: skipping checkpoint " << it->second << ": " << e.what() << "\n";
    }
  }
  return std::nullopt;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto st = load_latest_checkpoint(dir);
  if (!st) return std::nullopt;
  return st->source;
}

}  // namespace loom
