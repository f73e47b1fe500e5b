// GPT-2 or Llama for a language-model run: see train/language_model.h.
#include "train/language_model.h"

#include "distributed/memory_plan.h"
#include "nn/gpt.h"
#include "nn/hf_checkpoint.h"
#include "nn/hf_gpt2.h"
#include "nn/hf_llama.h"
#include "nn/llama.h"
#include "nn/lora_peft.h"

namespace loom::train {

namespace {

nn::GPTConfig gpt_config(const LanguageModelSpec& s) {
  nn::GPTConfig c = s.preset == "mini" ? nn::GPTConfig{.n_layer = 4, .n_head = 4, .n_embd = 128}
                                       : nn::GPTConfig::gpt2(s.preset);
  if (s.n_layer) c.n_layer = s.n_layer;
  if (s.n_head) c.n_head = s.n_head;
  if (s.n_embd) c.n_embd = s.n_embd;
  if (s.vocab_size > 0) c.vocab_size = s.vocab_size;  // 0: the preset's (--plan-only)
  c.block_size = s.seq_len;  // the position table: as long as the training windows
  return c;
}

nn::LlamaConfig llama_config(const LanguageModelSpec& s) {
  nn::LlamaConfig c = nn::LlamaConfig::preset(s.preset);
  if (s.n_layer) c.n_layers = s.n_layer;
  if (s.n_head) c.n_heads = s.n_head, c.n_kv_heads = std::min(c.n_kv_heads, s.n_head);
  if (s.n_embd) c.dim = s.n_embd;
  if (s.n_kv_head) c.n_kv_heads = s.n_kv_head;
  if (s.ffn_hidden) c.ffn_hidden = s.ffn_hidden;
  if (s.vocab_size > 0) c.vocab_size = s.vocab_size;
  c.max_seq_len = s.seq_len;
  return c;
}

// What LanguageModel needs of each architecture beside the model: its name and sizes for the
// title, its Hugging Face writer, and its tensors' Hugging Face names (for PEFT's adapters).
std::string title(const nn::GPT& m) { return str("GPT ", m.config.n_layer, "x", m.config.n_embd); }
void save_hf(const nn::GPT& m, const std::string& dir) { nn::save_hf_gpt2(m, dir); }
nn::HfTensorMap hf_tensor_map(const nn::GPT& m) { return nn::hf_gpt2_tensor_map(m.config); }

std::string title(const nn::Llama& m) {
  return str("Llama ", m.config.n_layers, "x", m.config.dim);
}
void save_hf(const nn::Llama& m, const std::string& dir) { nn::save_hf_llama(m, dir); }
nn::HfTensorMap hf_tensor_map(const nn::Llama& m) { return nn::hf_llama_tensor_map(m.config); }

template <typename Model>  // nn::GPT or nn::Llama
LanguageModel wrap(std::shared_ptr<Model> m) {
  return {m,
          str(title(*m), " (", m->num_parameters(), " parameters)"),
          [m](int64_t T) { return m->flops_per_token(T); },
          [m](bool on) { m->set_activation_checkpointing(on); },
          [m](const std::string& dir) { save_hf(*m, dir); },
          [m](const std::string& dir, const nn::LoRAOptions& o) {
            nn::save_peft_adapter(*m, hf_tensor_map(*m), o, dir);
          }};
}

// --init-from: the folder's model_type picks the architecture.
LanguageModel from_folder(const LanguageModelSpec& s) {
  nn::HfCheckpoint ckpt(s.init_from);
  const std::string type = ckpt.config().string("model_type", "gpt2");
  if (nn::is_llama_family(type)) {  // llama, mistral, qwen2, phi3: nn/hf_llama.h's Notes
    auto m = std::make_shared<nn::Llama>(nn::llama_config_from_hf(ckpt.config()));
    nn::load_hf_llama_into(*m, ckpt);
    return wrap(m);
  }
  auto m = std::make_shared<nn::GPT>(nn::gpt2_config_from_hf(ckpt.config()));
  nn::load_hf_gpt2_into(*m, ckpt);
  return wrap(m);
}

}  // namespace

LanguageModel make_language_model(const LanguageModelSpec& s) {
  LOOM_CHECK(s.arch == "gpt2" || s.arch == "llama", "--arch ", s.arch, ": gpt2 or llama");
  LOOM_CHECK(s.arch == "llama" || (s.n_kv_head == 0 && s.ffn_hidden == 0),
             "--n-kv-head and --ffn-hidden size a Llama (--arch llama), not --arch ", s.arch);
  if (s.init_from.empty())
    return s.arch == "llama" ? wrap(std::make_shared<nn::Llama>(llama_config(s)))
                             : wrap(std::make_shared<nn::GPT>(gpt_config(s)));
  LanguageModel lm = from_folder(s);
  LOOM_CHECK(s.seq_len <= lm.net->max_context(), "--init-from ", s.init_from, ": --seq-len ",
             s.seq_len, " is longer than the model's ", lm.net->max_context(), " positions");
  LOOM_CHECK(s.vocab_size <= lm.net->vocab_size(), "--init-from ", s.init_from,
             ": the data's vocabulary of ", s.vocab_size, " ids does not fit the model's ",
             lm.net->vocab_size());
  return lm;
}

distributed::ModelShape model_shape(const LanguageModelSpec& s) {
  LOOM_CHECK(s.init_from.empty(),
             "--plan-only plans a preset (--arch, --model, sizes), not "
             "--init-from ",
             s.init_from);
  if (s.arch == "llama") return distributed::model_shape(llama_config(s), "Llama " + s.preset);
  return distributed::model_shape(gpt_config(s), "GPT-2 " + s.preset);
}

}  // namespace loom::train
