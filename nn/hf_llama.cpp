// Llama's config fields and tensor names (nn/hf_llama.h) on top of the generic load and save of
// nn/hf_checkpoint.cpp. Leaves out: config fields that change nothing in loom's model
// (initializer_range, pretraining_tp: a way of splitting the same products, use_cache, the token
// ids: generation_config.json's business).
#include "nn/hf_llama.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "nn/init.h"

namespace loom::nn {

namespace {

// The fields whose values loom's Llama has no switch for: each must hold Llama's value.
void refuse_unsupported(const HfConfig& c, const LlamaConfig& l) {
  LOOM_CHECK(c.string("hidden_act", "silu") == "silu", c.where("hidden_act"),
             "; loom's Llama uses SwiGLU with silu");
  for (const char* key : {"attention_bias", "mlp_bias"})
    LOOM_CHECK(!c.boolean(key, false), c.where(key), "; loom's Llama has no biases");
  LOOM_CHECK(c.integer("head_dim", l.dim / l.n_heads) == l.dim / l.n_heads, c.where("head_dim"),
             "; loom's Llama has heads of hidden_size / num_attention_heads = ", l.dim / l.n_heads);
  for (const char* key :
       {"attention_dropout", "resid_pdrop", "embd_pdrop"})  // Phi-3 has the last two
    LOOM_CHECK(c.number(key, 0.0) == 0.0, c.where(key), "; loom's Llama has no dropout");
}

// rope_theta and the Llama 3 scaling: one "rope_parameters" object (transformers 5) or
// "rope_theta" with "rope_scaling" (transformers 4, the released folders).
void read_rope(const HfConfig& c, LlamaConfig& l) {
  const bool v5 = c.has("rope_parameters");
  const std::string key = v5 ? "rope_parameters" : "rope_scaling";
  l.rope_theta = c.number("rope_theta", 10000.0);
  l.rope_llama3.reset();
  if (!c.has(key)) return;
  HfConfig r = c.object(key);
  if (v5) l.rope_theta = r.number("rope_theta", l.rope_theta);
  const std::string type = r.string("rope_type", r.string("type", "default"));
  LOOM_CHECK(type == "default" || type == "llama3", c.where(key),
             "; loom's Llama knows rope_type \"default\" and \"llama3\"");
  LOOM_CHECK(r.number("partial_rotary_factor", 1.0) == 1.0, c.where(key),
             "; loom's Llama rotates whole heads (partial_rotary_factor 1)");
  if (type == "default") return;
  l.rope_llama3 = RopeLlama3Scaling{
      .factor = r.number("factor"),
      .low_freq_factor = r.number("low_freq_factor"),
      .high_freq_factor = r.number("high_freq_factor"),
      .original_max_position_embeddings = r.integer("original_max_position_embeddings")};
}

// The sliding window (Note [Mistral as Llama]): Mistral's applies whenever it is set, Qwen2's only
// with use_sliding_window; attention within it is the whole causal attention, so the model takes
// sequences up to the window.
void read_window(const HfConfig& c, const std::string& type, LlamaConfig& l) {
  const bool applies = type != "qwen2" || c.boolean("use_sliding_window", false);
  if (applies && c.has("sliding_window"))
    l.max_seq_len = std::min(l.max_seq_len, c.integer("sliding_window"));
}

}  // namespace

bool is_llama_family(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2" ||
         model_type == "phi3";
}

LlamaConfig llama_config_from_hf(const HfConfig& c) {
  const std::string type = c.string("model_type", "llama");
  LOOM_CHECK(is_llama_family(type), c.where("model_type"),
             "; load_hf_llama reads Llama, Mistral, Qwen2 and Phi-3 folders (\"llama\", "
             "\"mistral\", \"qwen2\", \"phi3\")");
  LlamaConfig l;
  l.qkv_bias = type == "qwen2";  // Note [Qwen2 as Llama]
  l.dim = c.integer("hidden_size");
  l.n_layers = c.integer("num_hidden_layers");
  l.n_heads = c.integer("num_attention_heads");
  l.n_kv_heads = c.integer("num_key_value_heads", l.n_heads);
  l.ffn_hidden = c.integer("intermediate_size");
  l.vocab_size = c.integer("vocab_size");
  l.norm_eps = c.number("rms_norm_eps", 1e-6);  // LlamaConfig's default
  l.tie_embeddings = c.boolean("tie_word_embeddings", false);
  l.max_seq_len = c.integer("max_position_embeddings", 2048);
  read_window(c, type, l);
  LOOM_CHECK(l.n_heads > 0, c.where("num_attention_heads"), "; it must be positive");
  refuse_unsupported(c, l);
  read_rope(c, l);
  l.check();
  return l;
}

namespace {

// A Llama with q, k and v biases is a Qwen2 (Note [Qwen2 as Llama]): its config says so, without
// the fields Qwen2's config has no use for, and without a sliding window.
void as_qwen2(nlohmann::ordered_json& j, const LlamaConfig& l) {
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  for (const char* key : {"attention_bias", "mlp_bias", "pretraining_tp", "head_dim"}) j.erase(key);
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = l.n_layers;
}

}  // namespace

std::string hf_llama_config_json(const LlamaConfig& l, DType dtype) {
  nlohmann::ordered_json rope = {{"rope_theta", l.rope_theta}, {"rope_type", "default"}};
  nlohmann::ordered_json scaling = nullptr;
  if (l.rope_llama3) {
    const RopeLlama3Scaling& s = *l.rope_llama3;
    scaling = {{"factor", s.factor},
               {"high_freq_factor", s.high_freq_factor},
               {"low_freq_factor", s.low_freq_factor},
               {"original_max_position_embeddings", s.original_max_position_embeddings},
               {"rope_type", "llama3"}};
    for (const auto& [k, v] : scaling.items()) rope[k] = v;
  }
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["dtype"] = torch_dtype_name(dtype);  // transformers 5 reads this, 4 the next
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["head_dim"] = l.dim / l.n_heads;
  j["hidden_act"] = "silu";
  j["hidden_size"] = l.dim;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = l.ffn_hidden;
  j["max_position_embeddings"] = l.max_seq_len;
  j["mlp_bias"] = false;
  j["model_type"] = "llama";
  j["num_attention_heads"] = l.n_heads;
  j["num_hidden_layers"] = l.n_layers;
  j["num_key_value_heads"] = l.n_kv_heads;
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = l.norm_eps;
  j["rope_parameters"] = rope;  // transformers 5; the next two for transformers 4
  j["rope_scaling"] = scaling;
  j["rope_theta"] = l.rope_theta;
  j["tie_word_embeddings"] = l.tie_embeddings;
  j["use_cache"] = true;
  j["vocab_size"] = l.vocab_size;
  if (l.qkv_bias) as_qwen2(j, l);
  return j.dump(2) + "\n";
}

namespace {

// Hugging Face tensors that are row blocks of one loom tensor, one after the other: q, k and v of
// c_attn (C, kv and kv rows), gate and up of c_fc (F and F).
using Parts = std::vector<std::pair<std::string, int64_t>>;  // module name, rows
void add_parts(HfTensorMap& map, const std::string& hf, const Parts& parts,
               const std::string& suffix, const std::string& loom) {
  int64_t start = 0;
  for (const auto& [name, rows] : parts) {
    map.push_back({hf + name + suffix, loom, false, start, rows});
    start += rows;
  }
}

}  // namespace

// In transformers' state_dict order (embed_tokens, each layer, norm, lm_head), so shards are
// filled alike.
HfTensorMap hf_llama_tensor_map(const LlamaConfig& cfg, const std::string& model_type) {
  const bool packed = model_type == "phi3";  // Note [Phi-3 as Llama]
  const int64_t C = cfg.dim, kv = cfg.n_kv_heads * (cfg.dim / cfg.n_heads), F = cfg.ffn_hidden;
  const Parts qkv_parts = {
      {"self_attn.q_proj", C}, {"self_attn.k_proj", kv}, {"self_attn.v_proj", kv}};
  const Parts gate_up_parts = {{"mlp.gate_proj", F}, {"mlp.up_proj", F}};
  HfTensorMap map{{"model.embed_tokens.weight", "embed_tokens.weight"}};
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    const std::string hf = "model.layers." + std::to_string(i) + ".";
    const std::string loom = "layers." + std::to_string(i) + ".";
    const std::string qkv = loom + "attn.c_attn.weight", gate_up = loom + "mlp.c_fc.weight";
    map.push_back({hf + "input_layernorm.weight", loom + "ln_1.weight"});
    if (packed) {
      map.push_back({hf + "self_attn.qkv_proj.weight", qkv});
    } else {
      add_parts(map, hf, qkv_parts, ".weight", qkv);
    }
    if (cfg.qkv_bias) add_parts(map, hf, qkv_parts, ".bias", loom + "attn.c_attn.bias");  // Qwen2
    map.push_back({hf + "self_attn.o_proj.weight", loom + "attn.c_proj.weight"});
    map.push_back({hf + "post_attention_layernorm.weight", loom + "ln_2.weight"});
    if (packed) {
      map.push_back({hf + "mlp.gate_up_proj.weight", gate_up});
    } else {
      add_parts(map, hf, gate_up_parts, ".weight", gate_up);
    }
    map.push_back({hf + "mlp.down_proj.weight", loom + "mlp.c_proj.weight"});
  }
  map.push_back({"model.norm.weight", "norm.weight"});
  if (!cfg.tie_embeddings) map.push_back({"lm_head.weight", "lm_head.weight"});
  return map;
}

ModuleHolder<Llama> load_hf_llama(const std::string& dir, Device device, DType dtype) {
  HfCheckpoint ckpt(dir);
  // Made on the device in its dtype, uninitialised: the file overwrites every weight (Note [Where
  // a module makes its parameters] in nn/init.h).
  init::ParameterScope where(device, dtype, /*skip_init=*/true);
  auto model = make<Llama>(llama_config_from_hf(ckpt.config()));
  load_hf_llama_into(*model, ckpt);
  return model;
}

void load_hf_llama_into(Llama& model, const HfCheckpoint& ckpt) {
  const bool tied = model.config.tie_embeddings;
  auto ignore = [&](const std::string& name) {
    return (tied && name == "lm_head.weight") || name.ends_with(".rotary_emb.inv_freq");
  };
  const std::string type = ckpt.config().string("model_type", "llama");
  load_hf_tensors(model, ckpt, hf_llama_tensor_map(model.config, type), ignore);
}

void save_hf_llama(const Llama& model, const std::string& dir, const HfSaveOptions& options) {
  const DType dtype = options.dtype.value_or(model.embed_tokens->weight.dtype());
  save_hf_tensors(model, hf_llama_tensor_map(model.config),
                  hf_llama_config_json(model.config, dtype), dir, options);
}

}  // namespace loom::nn
