// Llama in Hugging Face folders: load_hf_llama builds loom's Llama (nn/llama.h) from a folder that
// transformers wrote (LlamaForCausalLM: the released meta-llama folders, or save_pretrained's) and
// save_hf_llama writes one that transformers reads back. The config fields map to LlamaConfig and
// what loom's Llama cannot do is refused naming the field; the tensor names are transformers',
// q/k/v_proj packed into c_attn's rows and gate/up_proj into c_fc's (docs/llama.md has the table).
// Mistral, Qwen2 and Phi-3 folders (MistralForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM) read as
// Llamas too: Notes [Mistral as Llama], [Qwen2 as Llama] and [Phi-3 as Llama]. Leaves out:
// tokenizers, rope scalings other than Llama 3's, attention over a sliding window, and the generic
// parts (nn/hf_checkpoint.h).
#pragma once

#include <string>

#include "nn/hf_checkpoint.h"
#include "nn/llama.h"

namespace loom::nn {

// config.json -> LlamaConfig: hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads (num_attention_heads when absent), intermediate_size, vocab_size,
// rms_norm_eps, rope_theta and rope_scaling (transformers 4) or rope_parameters (transformers 5),
// tie_word_embeddings (false when absent, as LlamaConfig's default), max_position_embeddings.
// Refused with an error naming the file, the field and its value: model_type other than "llama",
// "mistral", "qwen2" or "phi3",
// hidden_act other than "silu", attention_bias or mlp_bias true, head_dim other than
// hidden_size / num_attention_heads, a rope_type other than "default" or "llama3", dropout
// (attention_dropout other than 0).
//
// Note [Mistral as Llama]
// transformers' MistralForCausalLM is LlamaForCausalLM (the same tensors, names, norms, rotary
// positions and grouped-query attention) with attention limited to the last sliding_window
// positions. Mistral 7B v0.2 and v0.3 have no window (sliding_window null): their folders are
// Llama folders. With a window (v0.1's 4096), attention over a sequence no longer than it sees
// every earlier position, as a Llama's does; so loom reads the folder with max_seq_len =
// min(max_position_embeddings, sliding_window) and refuses longer sequences instead of computing
// something else. save_hf_llama writes such a model as a Llama folder.
//
// Note [Qwen2 as Llama]
// Qwen2ForCausalLM (Qwen2 and Qwen2.5) is LlamaForCausalLM with biases on the q, k and v
// projections (not on o_proj or the MLP: a Llama config's attention_bias would put one on o_proj
// too, which is why that stays refused), and a sliding window only when use_sliding_window is
// true (then as Mistral's). loom reads it as a Llama with LlamaConfig::qkv_bias, the biases in
// c_attn.bias's rows as the weights are in c_attn.weight's; save_hf_llama writes a qkv_bias model
// as a Qwen2 folder.
//
// Note [Phi-3 as Llama]
// Phi3ForCausalLM (Phi-3 and Phi-3.5 mini) is LlamaForCausalLM with q, k and v stored as one
// qkv_proj (rows q, k, v) and gate and up as one gate_up_proj (rows gate, up): the packing loom's
// c_attn and c_fc already have, so the tensors map whole; its sliding window (Phi-3 mini 4k's
// 2047) caps the context as Mistral's does, and its dropout rates (resid_pdrop, embd_pdrop) must
// be 0. The 128k models' "longrope" scaling is refused with the other rope types. save_hf_llama
// writes a Llama folder.
LlamaConfig llama_config_from_hf(const HfConfig& c);

// The config.json transformers writes for LlamaForCausalLM with these sizes, its dtype `dtype`:
// rope_theta and rope_scaling as the released folders have them, and rope_parameters as
// transformers 5 writes it.
std::string hf_llama_config_json(const LlamaConfig& c, DType dtype);

// One entry per Hugging Face tensor: model.embed_tokens.weight, model.layers.{i}.input_layernorm,
// self_attn.{q,k,v}_proj (rows of layers.{i}.attn.c_attn), o_proj, post_attention_layernorm,
// mlp.{gate,up}_proj (rows of layers.{i}.mlp.c_fc), down_proj, model.norm, and lm_head.weight
// unless tied; with qkv_bias, self_attn.{q,k,v}_proj.bias (rows of layers.{i}.attn.c_attn.bias);
// none transposed.
// `model_type` "phi3" names q, k and v as one self_attn.qkv_proj and gate and up as one
// mlp.gate_up_proj, packed as loom packs them (Note [Phi-3 as Llama]); the others apart.
HfTensorMap hf_llama_tensor_map(const LlamaConfig& cfg, const std::string& model_type = "llama");

// The model_types load_hf_llama reads: "llama", "mistral", "qwen2", "phi3".
bool is_llama_family(const std::string& model_type);

// A new Llama on `device` in `dtype` (whatever the file's dtype) with the folder's weights.
ModuleHolder<Llama> load_hf_llama(const std::string& dir, Device device = kCPU, DType dtype = kF32);
// The checkpoint's weights into an existing Llama of the same sizes (its device and dtype),
// through load_hf_tensors (every error of it: the file, the tensor and both shapes). A tied
// lm_head.weight and the rotary_emb.inv_freq buffers of older folders are ignored.
void load_hf_llama_into(Llama& model, const HfCheckpoint& ckpt);

// Writes config.json and the weights as LlamaForCausalLM's save_pretrained does (no
// lm_head.weight when tied), in options.dtype or the parameters' own dtype.
void save_hf_llama(const Llama& model, const std::string& dir, const HfSaveOptions& options = {});

}  // namespace loom::nn
