// GPT-2's config fields and tensor names (nn/hf_gpt2.h) on top of the generic load and save of
// nn/hf_checkpoint.cpp. Leaves out: config fields that change nothing in loom's model
// (initializer_range, summary_*, reorder_and_upcast_attn: float16 attention numerics, n_ctx).
#include "nn/hf_gpt2.h"

#include <nlohmann/json.hpp>

#include "nn/init.h"

namespace loom::nn {

namespace {

// The fields whose values loom's GPT has no switch for: each must hold GPT-2's value.
void refuse_unsupported(const HfConfig& c, int64_t n_embd) {
  c.check_model_type("gpt2", "load_hf_gpt2 reads GPT-2 folders");
  const std::string act = c.string("activation_function", "gelu_new");
  LOOM_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast",
             c.where("activation_function"),
             "; loom's GPT uses the tanh GELU (gelu_new, gelu_pytorch_tanh, gelu_fast)");
  LOOM_CHECK(c.integer("n_inner", 4 * n_embd) == 4 * n_embd, c.where("n_inner"),
             "; loom's GPT has an MLP 4 n_embd = ", 4 * n_embd, " wide");
  LOOM_CHECK(c.number("layer_norm_epsilon", 1e-5) == 1e-5, c.where("layer_norm_epsilon"),
             "; loom's GPT uses LayerNorm eps 1e-5");
  LOOM_CHECK(c.boolean("scale_attn_weights", true), c.where("scale_attn_weights"),
             "; loom's GPT scales attention by 1/sqrt(head size)");
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "add_cross_attention"})
    LOOM_CHECK(!c.boolean(key, false), c.where(key), "; loom's GPT has no such option");
  LOOM_CHECK(c.boolean("tie_word_embeddings", true), c.where("tie_word_embeddings"),
             "; loom's GPT ties the output head to wte (Note [Tied embedding] in nn/gpt.h)");
}

}  // namespace

GPTConfig gpt2_config_from_hf(const HfConfig& c, std::optional<double> dropout) {
  GPTConfig g;
  g.vocab_size = c.integer("vocab_size");
  g.block_size = c.integer("n_positions");
  g.n_layer = c.integer("n_layer");
  g.n_head = c.integer("n_head");
  g.n_embd = c.integer("n_embd");
  g.bias = true;
  refuse_unsupported(c, g.n_embd);
  if (dropout) {
    g.dropout = *dropout;
  } else {  // transformers' defaults are 0.1
    g.dropout =
        c.same_number({"resid_pdrop", "embd_pdrop", "attn_pdrop"}, 0.1,
                      "loom's GPT has one dropout rate (HfGpt2LoadOptions::dropout sets it)");
  }
  g.check();
  return g;
}

std::string hf_gpt2_config_json(const GPTConfig& g, DType dtype) {
  nlohmann::ordered_json j;
  j["activation_function"] = "gelu_new";
  j["architectures"] = {"GPT2LMHeadModel"};
  j["attn_pdrop"] = g.dropout;
  const bool gpt2_vocab = g.vocab_size > 50256;  // <|endoftext|> of GPT-2's tokenizer
  j["bos_token_id"] = gpt2_vocab ? nlohmann::ordered_json(50256) : nullptr;
  j["dtype"] = torch_dtype_name(dtype);  // transformers 5 reads this, 4 the next
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["embd_pdrop"] = g.dropout;
  j["eos_token_id"] = j["bos_token_id"];
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = 1e-5;
  j["model_type"] = "gpt2";
  j["n_embd"] = g.n_embd;
  j["n_head"] = g.n_head;
  j["n_inner"] = nullptr;
  j["n_layer"] = g.n_layer;
  j["n_positions"] = g.block_size;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = g.dropout;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["use_cache"] = true;
  j["vocab_size"] = g.vocab_size;
  return j.dump(2) + "\n";
}

// GPT's state_dict in registration order (wte, wpe, then each block, then ln_f): the order
// transformers' state_dict has too, so shards are filled alike.
HfTensorMap hf_gpt2_tensor_map(const GPTConfig& cfg, const std::string& prefix) {
  HfTensorMap map;
  auto add = [&](const std::string& name, bool transposed = false) {
    map.push_back({prefix + name, name, transposed});
  };
  add("wte.weight");
  add("wpe.weight");
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* part :
         {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      const bool conv1d = part[0] != 'l';  // every part but the layer norms is a Conv1D
      add(h + part + ".weight", conv1d);
      add(h + part + ".bias");
    }
  }
  add("ln_f.weight");
  add("ln_f.bias");
  return map;
}

ModuleHolder<GPT> load_hf_gpt2(const std::string& dir, Device device,
                               const HfGpt2LoadOptions& options) {
  HfCheckpoint ckpt(dir);
  init::ParameterScope where(device, options.dtype, /*skip_init=*/true);  // the file fills them
  auto model = make<GPT>(gpt2_config_from_hf(ckpt.config(), options.dropout));
  load_hf_gpt2_into(*model, ckpt);
  return model;
}

void load_hf_gpt2_into(GPT& model, const HfCheckpoint& ckpt) {
  // GPT2LMHeadModel's names start with "transformer."; GPT2Model's (the hub's gpt2) do not.
  const std::string prefix =
      ckpt.contains("transformer.wte.weight") || !ckpt.contains("wte.weight") ? "transformer." : "";
  auto ignore = [&](const std::string& name) {
    return name == "lm_head.weight" ||  // tied to wte: transformers ignores it too
           (name.starts_with(prefix + "h.") &&
            (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")));
  };
  load_hf_tensors(model, ckpt, hf_gpt2_tensor_map(model.config, prefix), ignore);
}

void save_hf_gpt2(const GPT& model, const std::string& dir, const HfSaveOptions& options) {
  const DType dtype = options.dtype.value_or(model.wte->weight.dtype());
  save_hf_tensors(model, hf_gpt2_tensor_map(model.config), hf_gpt2_config_json(model.config, dtype),
                  dir, options);
}

}  // namespace loom::nn
