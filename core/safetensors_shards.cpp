// SafetensorsFolder (the index and its shards, checked against each other) and
// write_safetensors_folder (transformers' shard plan, file names and index JSON).
// Leaves out: reading tensors' bytes (core/safetensors_mapped.cpp does).
#include "core/safetensors_shards.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/atomic_file.h"

namespace loom {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string safetensors_shard_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index, count);
  return buf;
}

// ---------------------------------------------------------------- reading

SafetensorsFolder::SafetensorsFolder(const std::string& dir) : dir_(dir) {
  LOOM_CHECK(fs::is_directory(dir), "Hugging Face folder '", dir, "' is not a folder");
  fs::path single = fs::path(dir) / kSafetensorsWeights, index = fs::path(dir) / kSafetensorsIndex;
  if (fs::exists(single)) {
    auto f = std::make_unique<MappedSafetensors>(single.string());
    for (const auto& e : f->header().entries) tensors_[e.name] = Ref{f.get(), &e};
    files_[kSafetensorsWeights] = std::move(f);
    return;
  }
  LOOM_CHECK(fs::exists(index), "Hugging Face folder '", dir, "' has neither ", kSafetensorsWeights,
             " nor ", kSafetensorsIndex,
             " (loom reads safetensors weights only, not pytorch_model.bin)");
  sharded_ = true;
  open_index(index.string());
}

namespace {

json read_index_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, "safetensors index '", path, "': cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    LOOM_FAIL("safetensors index '", path, "': not valid JSON: ", e.what());
  }
}

}  // namespace

// Every shard the weight map names is mapped once; then the two directions are checked: each
// listed tensor is in its shard, and each shard's tensors are listed for it.
void SafetensorsFolder::open_index(const std::string& path) {
  json root = read_index_json(path);
  LOOM_CHECK(root.is_object() && root.contains("weight_map") && root["weight_map"].is_object(),
             "safetensors index '", path, "': no \"weight_map\" object");
  for (const auto& [name, v] : root["weight_map"].items()) {
    LOOM_CHECK(v.is_string(), "safetensors index '", path, "': the shard of tensor '", name,
               "' should be a file name, got ", v.dump());
    const std::string shard = v.get<std::string>();
    LOOM_CHECK(
        !shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
        "safetensors index '", path, "': tensor '", name, "' names the shard '", shard,
        "', which is not a file name in the folder");
    auto it = files_.find(shard);
    if (it == files_.end()) {
      std::string shard_path = (fs::path(dir_) / shard).string();
      LOOM_CHECK(fs::exists(shard_path), "safetensors index '", path, "': tensor '", name,
                 "' is in shard '", shard, "', which does not exist");
      it = files_.emplace(shard, std::make_unique<MappedSafetensors>(shard_path)).first;
    }
    const SafetensorsEntry* e = it->second->find(name);
    LOOM_CHECK(e, "safetensors index '", path, "' places tensor '", name, "' in '",
               it->second->path(), "', which does not hold it");
    tensors_[name] = Ref{it->second.get(), e};
  }
  for (const auto& [shard, f] : files_)
    for (const auto& e : f->header().entries) {
      auto t = tensors_.find(e.name);
      LOOM_CHECK(t != tensors_.end() && t->second.file == f.get(), "safetensors file '", f->path(),
                 "' holds tensor '", e.name, "', which ", kSafetensorsIndex,
                 t == tensors_.end() ? " does not list" : " places in another shard");
    }
}

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> out;
  for (const auto& [name, ref] : tensors_) out.push_back(name);
  return out;
}

SafetensorsFolder::Ref SafetensorsFolder::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? Ref{} : it->second;
}

std::vector<const MappedSafetensors*> SafetensorsFolder::files() const {
  std::vector<const MappedSafetensors*> out;
  for (const auto& [name, f] : files_) out.push_back(f.get());
  return out;
}

// ---------------------------------------------------------------- writing

namespace {

uint64_t spec_bytes(const TensorSpec& s) { return uint64_t(numel(s.shape)) * dtype_size(s.dtype); }

// Greedy in order: shards[i] = the indices of specs in shard i.
std::vector<std::vector<size_t>> plan_shards(const std::vector<TensorSpec>& specs,
                                             uint64_t max_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t used = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t n = spec_bytes(specs[i]);
    if (!shards.back().empty() && used + n > max_bytes) shards.emplace_back(), used = 0;
    shards.back().push_back(i);
    used += n;
  }
  return shards;
}

// One file: its tensors fetched from host(), checked against their specs, in name order.
void write_one(const std::string& path, const std::vector<TensorSpec>& specs,
               std::vector<size_t> members, const std::function<Tensor(size_t)>& host,
               const StringMap& metadata) {
  std::sort(members.begin(), members.end(),
            [&](size_t a, size_t b) { return specs[a].name < specs[b].name; });
  NamedTensors tensors;
  for (size_t i : members) {
    Tensor t = host(i);
    const TensorSpec& s = specs[i];
    LOOM_CHECK(t.defined() && t.dtype() == s.dtype && t.shape() == s.shape, "safetensors file '",
               path, "': tensor '", s.name, "' should be ", dtype_name(s.dtype), " ", s.shape,
               ", got ", t.defined() ? describe(t) : std::string("undefined"));
    tensors.emplace_back(s.name, std::move(t));
  }
  write_safetensors(path, tensors, metadata);
}

void write_index(const std::string& path, const std::vector<TensorSpec>& specs,
                 const std::vector<std::vector<size_t>>& shards) {
  json map = json::object();  // std::map underneath: keys sorted, as json.dumps(sort_keys=True)
  uint64_t params = 0, bytes = 0;
  for (size_t s = 0; s < shards.size(); ++s)
    for (size_t i : shards[s]) {
      map[specs[i].name] = safetensors_shard_name(s + 1, shards.size());
      params += uint64_t(numel(specs[i].shape));
      bytes += spec_bytes(specs[i]);
    }
  json root = {{"metadata", {{"total_parameters", params}, {"total_size", bytes}}},
               {"weight_map", std::move(map)}};
  std::string text = root.dump(2) + "\n";
  AtomicFileWriter out(path);
  out.write(text.data(), text.size());
  out.commit();
}

// Weight files of the folder that `kept` does not name: an earlier save's other shards.
void remove_stale(const std::string& dir, const std::set<std::string>& kept) {
  static const std::regex weights(
      R"(model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json)");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (std::regex_match(name, weights) && !kept.count(name)) fs::remove(e.path());
  }
}

}  // namespace

void write_safetensors_folder(const std::string& dir, const std::vector<TensorSpec>& specs,
                              const std::function<Tensor(size_t)>& host, uint64_t max_shard_bytes,
                              const StringMap& metadata) {
  LOOM_CHECK(max_shard_bytes > 0, "write_safetensors_folder '", dir,
             "': max_shard_bytes must be positive");
  std::set<std::string> names;
  for (const auto& s : specs)
    LOOM_CHECK(names.insert(s.name).second, "write_safetensors_folder '", dir,
               "': two tensors are named '", s.name, "'");
  fs::create_directories(dir);
  auto shards = plan_shards(specs, max_shard_bytes);
  std::set<std::string> kept;
  if (shards.size() == 1) {
    kept.insert(kSafetensorsWeights);
    write_one((fs::path(dir) / kSafetensorsWeights).string(), specs, shards[0], host, metadata);
  } else {
    for (size_t s = 0; s < shards.size(); ++s) {
      std::string name = safetensors_shard_name(s + 1, shards.size());
      kept.insert(name);
      write_one((fs::path(dir) / name).string(), specs, shards[s], host, metadata);
    }
    kept.insert(kSafetensorsIndex);
    write_index((fs::path(dir) / kSafetensorsIndex).string(), specs, shards);
  }
  remove_stale(dir, kept);
}

}  // namespace loom
