// Training checkpoints on top of safetensors: naming, metadata, checksum, keep-last-K, fallback.
#include "nn/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/atomic_file.h"
#include "core/crc32c.h"
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
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  int64_t n = -1;
  return parse_int(digits, n) ? n : -1;
}

// CRC-32C over every tensor in name order: name, '\0', then its bytes (host, contiguous).
uint32_t checksum(const NamedTensors& host) {
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& nt : host) sorted.push_back(&nt);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  uint32_t crc = 0;
  for (const auto* nt : sorted) {
    crc = crc32c(nt->first.c_str(), nt->first.size() + 1, crc);
    const Tensor& t = nt->second;
    if (t.numel() > 0) crc = crc32c(t.data_ptr(), size_t(t.numel()) * t.element_size(), crc);
  }
  return crc;
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
  std::string where = source.empty() ? std::string("training state") : "checkpoint '" + source + "'";
  auto it = extra.find(key);
  LOOM_CHECK(it != extra.end(), where, ": no extra entry '", key, "'");
  int64_t v = 0;
  LOOM_CHECK(parse_int(it->second, v), where, ": extra entry '", key, "' is not an integer: '", it->second, "'");
  return v;
}

std::string save_checkpoint(const std::string& dir, int64_t number, const TrainingState& state, int keep_last) {
  LOOM_CHECK(number >= 0, "save_checkpoint: the checkpoint number must be >= 0, got ", number);
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK(!ec, "save_checkpoint: cannot create folder '", dir, "': ", ec.message());
  std::string path = (fs::path(dir) / checkpoint_name(number)).string();

  NamedTensors host;
  const NamedTensors* parts[] = {&state.model, &state.optimizer, &state.scaler};
  for (int s = 0; s < 3; ++s)
    for (const auto& [name, t] : *parts[s]) {
      LOOM_CHECK(t.defined(), "save_checkpoint '", path, "': tensor '", kSections[s], name, "' is undefined");
      host.emplace_back(kSections[s] + name, to_host_contiguous(t));
    }

  StringMap meta;
  meta["loom_checkpoint_format"] = std::to_string(kCheckpointFormat);
  meta["loom_version"] = LOOM_VERSION;
  meta["loom_crc32c"] = std::to_string(checksum(host));
  for (const auto& [k, v] : state.extra) meta["extra." + k] = v;
  auto rng = state.rng;
  if (!rng.count("default")) rng["default"] = default_generator().state();
  for (const auto& [name, g] : rng) {
    meta["rng." + name + ".seed"] = std::to_string(g.seed);
    meta["rng." + name + ".offset"] = std::to_string(g.offset);
  }
  write_safetensors(path, host, meta);

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
  SafetensorsFile f = read_safetensors(path);
  std::string where = "checkpoint '" + path + "'";
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = f.metadata.find(key);
    LOOM_CHECK(it != f.metadata.end(), where, ": metadata has no '", key,
               "' (not a loom checkpoint, or written by another format version)");
    return it->second;
  };
  LOOM_CHECK(meta("loom_checkpoint_format") == std::to_string(kCheckpointFormat), where, ": format version '",
             meta("loom_checkpoint_format"), "', this loom reads version ", kCheckpointFormat);
  uint32_t stored = 0;
  LOOM_CHECK(parse_int(meta("loom_crc32c"), stored), where, ": bad loom_crc32c '", meta("loom_crc32c"), "'");
  uint32_t actual = checksum(f.tensors);
  LOOM_CHECK(stored == actual, where, ": checksum mismatch (stored ", stored, ", computed ", actual,
             "): the data is corrupt");

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
    LOOM_CHECK(placed, where, ": unexpected tensor '", name, "' (names start with model., optim. or scaler.)");
  }
  for (const auto& [key, value] : f.metadata) {
    if (key.compare(0, 6, "extra.") == 0) {
      st.extra[key.substr(6)] = value;
    } else if (key.compare(0, 4, "rng.") == 0) {
      size_t dot = key.rfind('.');
      std::string name = key.substr(4, dot - 4), field = key.substr(dot + 1);
      LOOM_CHECK(dot > 4 && (field == "seed" || field == "offset"), where, ": bad rng metadata key '", key, "'");
      uint64_t v = 0;
      LOOM_CHECK(parse_int(value, v), where, ": rng metadata '", key, "' is not an unsigned integer: '", value, "'");
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
