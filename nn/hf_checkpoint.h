// Hugging Face model folders (config.json and safetensors weights, one file or shards) for any
// model: HfCheckpoint opens a folder and hands out tensors by name, each copied from the mapped
// file straight to its device and dtype; load_hf_tensors / save_hf_tensors move a Module's
// state_dict in and out through a name mapping (Note [Adding a Hugging Face model]).
// Leaves out: each model's names and config fields (nn/hf_gpt2.h), tokenizers, and weight
// formats other than safetensors (pytorch_model.bin, GGUF).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors_shards.h"
#include "nn/hf_config.h"
#include "nn/module.h"

namespace loom::nn {

// Note [Adding a Hugging Face model]
// A model's support is a mapping and a config, nothing else (nn/hf_gpt2.cpp is the example):
//  1. config.json -> the model's config: read the fields with HfConfig's getters, and refuse with
//     an error naming the field and its value whatever the loom model cannot do (another
//     activation, biases it lacks, untied embeddings it ties).
//  2. The names: an HfTensorMap with one entry per tensor of the model's state_dict(), its
//     Hugging Face name, and `transposed` where the file stores the transpose (GPT-2's Conv1D
//     weights are (in, out); a Linear's weight is (out, in); Llama's Linears need no transpose).
//  3. Load: build the model from the config (on the device and dtype wanted), then
//     load_hf_tensors(model, checkpoint, map, ignore): `ignore` names the file's tensors the model
//     has no use for (GPT-2's attn.bias masks, a tied lm_head.weight); any other unmapped tensor
//     is an error. For Llama: model.embed_tokens.weight, model.layers.{i}.input_layernorm.weight,
//     model.layers.{i}.self_attn.{q,k,v,o}_proj.weight, model.layers.{i}.post_attention_layernorm
//     .weight, model.layers.{i}.mlp.{gate,up,down}_proj.weight, model.norm.weight, lm_head.weight
//     (absent when tie_word_embeddings is true), none transposed; its config's rope fields are
//     "rope_theta" plus "rope_scaling" (transformers 4, the released Llama 3 folders) or one
//     "rope_parameters" object holding both (transformers 5, tests/nn/golden/hf/llama/config.json).
//  4. Save: write the config.json that transformers reads back (model_type, architectures,
//     the sizes, "dtype"/"torch_dtype"), and call save_hf_tensors with the same map.
// The fixtures come from scripts/make-hf-fixtures.py (a tiny random model per architecture, and
// transformers' logits, loss, gradients and greedy ids for it).
// A loom tensor that packs several of the file's (Llama's c_attn holds q_proj, k_proj and v_proj)
// has one entry per part, each naming its rows: the parts must tile dim 0 of the loom tensor.
struct HfTensor {
  std::string hf_name;      // in the checkpoint: "transformer.h.0.attn.c_attn.weight"
  std::string loom_name;    // in Module::state_dict(): "h.0.attn.c_attn.weight"
  bool transposed = false;  // the file holds the transpose of the 2-d loom tensor
  int64_t row_start = 0;    // the file's tensor is rows [row_start, row_start + rows) of the
  int64_t rows = -1;        // loom tensor (dim 0); -1: all of it (not with `transposed`)
};
using HfTensorMap = std::vector<HfTensor>;

class HfCheckpoint {
 public:
  // Reads dir/config.json and maps the weights (core/safetensors_shards.h); errors name the
  // folder and the file.
  explicit HfCheckpoint(const std::string& dir);

  const std::string& dir() const { return weights_.dir(); }
  const HfConfig& config() const { return config_; }
  const SafetensorsFolder& weights() const { return weights_; }
  std::vector<std::string> names() const { return weights_.names(); }  // sorted
  bool contains(const std::string& name) const { return weights_.find(name).file != nullptr; }
  // The tensor's entry and the file that holds it; an error naming the folder when it has none.
  SafetensorsFolder::Ref at(const std::string& name) const;

  // The tensor as a new contiguous tensor on `device`, in `dtype` (the file's when unset).
  Tensor tensor(const std::string& name, Device device = kCPU,
                std::optional<DType> dtype = std::nullopt) const;
  // Copies the tensor into dst (any device and dtype, converted on the way, but not between
  // integer and floating-point) and gives its mapped pages back. The file's shape must be dst's,
  // or its transpose when `transposed` (dst 2-d); otherwise an error naming the file, the tensor
  // and both shapes.
  void copy_into(const std::string& name, const Tensor& dst, bool transposed = false) const;

 private:
  SafetensorsFolder weights_;
  HfConfig config_;
};

// Copies every tensor of `map` from `ckpt` into model.state_dict()'s tensors (their device and
// dtype), one at a time. Errors name the folder, the file, the tensor and the shapes or dtypes: a
// mapped tensor missing from the folder, a tensor of the folder that is neither mapped nor
// ignored (`ignore` may be empty), a state_dict entry the map leaves out or a map entry the
// model lacks, a shape other than the model's, a dtype other than config.json's "dtype" (when
// it has one) or not floating-point.
void load_hf_tensors(Module& model, const HfCheckpoint& ckpt, const HfTensorMap& map,
                     const std::function<bool(const std::string&)>& ignore = nullptr);

struct HfSaveOptions {
  std::optional<DType> dtype = std::nullopt;  // the files' dtype; unset: each tensor's own
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;
};

// Writes `config_json` as dir/config.json and the model's tensors under their Hugging Face names
// (transposed back where the map says) as transformers' save_pretrained does
// (write_safetensors_folder in core/safetensors_shards.h, metadata {"format": "pt"}). Each tensor
// goes to the host only while its shard is written.
void save_hf_tensors(const Module& model, const HfTensorMap& map, const std::string& config_json,
                     const std::string& dir, const HfSaveOptions& options = {});

}  // namespace loom::nn
