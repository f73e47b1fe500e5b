// HfConfig: a Hugging Face config.json read back (n_layer, hidden_size, rope_scaling, ...), with
// typed getters whose errors name the file, the field and the value. The JSON library stays
// inside the .cpp (no installed header includes it).
// Leaves out: what the fields mean for a model (each model's mapping reads the ones it knows:
// nn/hf_gpt2.h) and writing (each mapping writes its own config.json).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace loom::nn {

class HfConfig {
 public:
  // Parses `text` (a JSON object); `source` names it in errors ("dir/config.json").
  static HfConfig parse(const std::string& text, const std::string& source);
  static HfConfig read(const std::string& path);

  const std::string& source() const;
  // The field is present and not null.
  bool has(const std::string& key) const;
  // The field's value; an error naming the source, the field and the value when it is missing,
  // null or of another type. The second form returns `fallback` when it is missing or null.
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;  // an integer or a float
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  // An integer or a list of them, as a list (generation_config.json's eos_token_id); an error as
  // integer's for anything else.
  std::vector<int64_t> integers(const std::string& key) const;
  // A nested object (Llama's "rope_scaling"); its source reads "dir/config.json: rope_scaling".
  HfConfig object(const std::string& key) const;
  // The field's JSON text as written ("null" when missing), for messages.
  std::string text(const std::string& key) const;
  std::vector<std::string> keys() const;
  // The start of an error about a field whose value a model cannot take: "Hugging Face config
  // 'dir/config.json': field "hidden_act" is "relu"".
  std::string where(const std::string& key) const;

  // Checks for a model's mapping (nn/hf_gpt2.h, nn/hf_llama.h, nn/hf_bert.h). model_type, when
  // present, is `type`; `reader` says who reads that type ("loom's BERT reads BERT folders").
  void check_model_type(const std::string& type, const std::string& reader) const;
  // The one value of fields a model has one setting for (GPT-2's three dropout rates; fallback
  // for each missing one); an error naming them all and `why` when they differ.
  double same_number(const std::vector<std::string>& keys, double fallback,
                     const std::string& why) const;

  // The checkpoint's dtype: "dtype" (transformers 5) or "torch_dtype" (transformers 4):
  // "float32", "float16", "bfloat16", "float64"; nullopt when neither is set.
  std::optional<DType> dtype() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// torch's name of a dtype as config.json writes it ("bfloat16"); an error for non-float dtypes.
const char* torch_dtype_name(DType t);

}  // namespace loom::nn
