// The weights of a model folder as Hugging Face's transformers writes them: one file,
// model.safetensors, or shards model-00001-of-0000N.safetensors listed by
// model.safetensors.index.json {"metadata": {"total_size": bytes, ...}, "weight_map": {tensor:
// shard}}. Reading maps every file (core/safetensors_mapped.h); writing fills shards in order.
// Leaves out: config.json and what the tensors mean (nn/hf_checkpoint.h), other weight files
// (pytorch_model.bin, other file stems).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors_mapped.h"

namespace loom {

constexpr const char* kSafetensorsWeights = "model.safetensors";
constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";
// transformers' save_pretrained(max_shard_size="5GB"): decimal gigabytes.
constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ull;

// "model-00002-of-00003.safetensors" for shard 2 of 3 (1-based, as transformers names them).
std::string safetensors_shard_name(size_t index, size_t count);

class SafetensorsFolder {
 public:
  // Maps dir/model.safetensors, or else dir/model.safetensors.index.json's shards (the order
  // transformers looks for them in). Errors name the folder or the file: neither file, an index
  // that is not JSON or has no weight_map, a shard name that leaves the folder, a shard that
  // cannot be opened or has a bad header, a tensor the index places in a shard that does not hold
  // it, and a tensor of a shard that the index does not place there.
  explicit SafetensorsFolder(const std::string& dir);

  struct Ref {
    const MappedSafetensors* file = nullptr;  // null when the folder has no such tensor
    const SafetensorsEntry* entry = nullptr;
  };
  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  // Every tensor's name, sorted.
  std::vector<std::string> names() const;
  Ref find(const std::string& name) const;
  // The mapped files, in name order.
  std::vector<const MappedSafetensors*> files() const;

 private:
  void open_index(const std::string& index_path);
  std::string dir_;
  bool sharded_ = false;
  std::map<std::string, std::unique_ptr<MappedSafetensors>> files_;  // by file name
  std::map<std::string, Ref> tensors_;
};

// One tensor to write: its name, dtype and shape (the bytes come later, from a callback).
struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

// Writes `specs` into the folder `dir` (created if missing) as transformers' save_pretrained
// does: model.safetensors when their bytes fit in max_shard_bytes, else shards filled greedily in
// the order of `specs` (a shard is closed when the next tensor would take it over
// max_shard_bytes; a larger tensor gets a shard of its own) and the index. Each file holds its
// tensors in name order with `metadata` in its header; the index lists total_parameters,
// total_size and the weight map with sorted keys. host(i) returns specs[i] as a contiguous CPU
// tensor of that dtype and shape; it is called shard by shard, so at most one shard's tensors are
// on the host at a time. Each file is written atomically; weight files of an earlier save that
// this one does not write (another shard count) are removed afterwards.
void write_safetensors_folder(const std::string& dir, const std::vector<TensorSpec>& specs,
                              const std::function<Tensor(size_t)>& host, uint64_t max_shard_bytes,
                              const StringMap& metadata = {});

}  // namespace loom
