// The plain transformer modules (nn/transformer.h): the config's checks, the norm and MLP
// factories, attention, MLP, block and stack, each forward the composition of its children.
// Leaves out: the fused forms (nn/fused_transformer.cpp) and the models' embeddings and heads.
#include "nn/transformer.h"

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/ops.h"
#include "autograd/ops/rope.h"

namespace loom::nn {

// ---------------------------------------------------------------- config and factories

void TransformerConfig::check() const {
  LOOM_CHECK(n_embd > 0 && n_head > 0 && n_kv_head >= 0 && mlp_hidden >= 0,
             "TransformerConfig: sizes must be positive (n_embd ", n_embd, ", n_head ", n_head,
             ", n_kv_head ", n_kv_head, ", mlp_hidden ", mlp_hidden, ")");
  LOOM_CHECK(n_embd % n_head == 0, "TransformerConfig: n_embd ", n_embd,
             " is not divisible by n_head ", n_head);
  LOOM_CHECK(n_kv_head == 0 || (n_kv_head <= n_head && n_head % n_kv_head == 0),
             "TransformerConfig: n_kv_head ", n_kv_head, " does not divide n_head ", n_head,
             " (grouped-query attention shares each key/value head among n_head / n_kv_head)");
  LOOM_CHECK(positions != Positions::Rotary || head_dim() % 2 == 0,
             "TransformerConfig: rotary positions need an even head size, got n_embd ", n_embd,
             " / n_head ", n_head, " = ", head_dim());
  LOOM_CHECK(positions != Positions::Rotary || causal,
             "TransformerConfig: rotary positions are for causal attention (causal is false)");
  LOOM_CHECK(dropout >= 0.0 && dropout < 1.0, "TransformerConfig: dropout ", dropout,
             " is not in [0, 1)");
  LOOM_CHECK(norm_eps > 0.0, "TransformerConfig: norm_eps ", norm_eps, " must be positive");
}

std::shared_ptr<Module> make_norm(const TransformerConfig& cfg) {
  switch (cfg.norm) {
    case NormKind::LayerNorm:
      return make<LayerNorm>(cfg.n_embd, LayerNormOptions{.eps = cfg.norm_eps, .bias = cfg.bias});
    case NormKind::RMSNorm:
      return make<RMSNorm>(cfg.n_embd, cfg.norm_eps);
  }
  LOOM_FAIL("make_norm: unknown NormKind ", int(cfg.norm));
}

std::shared_ptr<Module> make_feed_forward(const TransformerConfig& cfg) {
  switch (cfg.mlp) {
    case MLPKind::GELU:
      return make<MLP>(cfg);
    case MLPKind::SwiGLU:
      return make<SwiGLUMLP>(cfg);
  }
  LOOM_FAIL("make_feed_forward: unknown MLPKind ", int(cfg.mlp));
}

// ---------------------------------------------------------------- static KV cache

void StaticKVCache::begin(int64_t B, int64_t T, Device device) {
  LOOM_CHECK(!autograd::is_grad_enabled(),
             "StaticKVCache: inference only; run the forward under NoGradGuard");
  LOOM_CHECK(T >= 1 && length + T <= max_len, "StaticKVCache: ", length, " cached positions and ",
             T, " new ones exceed its max_len of ", max_len);
  LOOM_CHECK(length == 0 || T == 1, "StaticKVCache: with ", length,
             " cached positions the input must be one position, got ", T);
  if (!position.defined()) position = zeros({1}, {.dtype = kI64, .device = device});
  LOOM_CHECK(position.device() == device, "StaticKVCache: its position is on ", position.device(),
             ", the input on ", device, " (one cache per model and device)");
  if (T > 1) {
    positions = position + arange(0, double(T), 1, {.dtype = kI64, .device = device});  // (T)
    key_lengths = Tensor();  // a prompt writes slots [0, T) and attends causally
    return;
  }
  positions = position;                                   // (1)
  key_lengths = contiguous(expand(position + 1.0, {B}));  // (B): keys [0, position]
}

void StaticKVCache::advance(int64_t T) {
  position.add_(scalar_tensor(double(T), {.dtype = kI64, .device = position.device()}));
  length += T;
}

void StaticKVCache::reset() {
  length = 0;
  if (position.defined()) position.zero_();
}

// ---------------------------------------------------------------- attention

SelfAttention::SelfAttention(const TransformerConfig& cfg)
    : Module(cfg.causal ? "CausalSelfAttention" : "SelfAttention"),
      n_head(cfg.n_head),
      n_kv_head(cfg.kv_heads()),
      n_embd(cfg.n_embd),
      head_dim(cfg.head_dim()),
      dropout(cfg.dropout),
      causal(cfg.causal),
      positions(cfg.positions),
      rope(cfg.rope) {
  cfg.check();
  const int64_t kv = n_kv_head * cfg.head_dim();
  c_attn =
      register_module("c_attn", make<Linear>(n_embd, n_embd + 2 * kv, cfg.bias || cfg.qkv_bias));
  c_proj = register_module("c_proj", make<Linear>(n_embd, n_embd, cfg.bias));
  resid_dropout = register_module("resid_dropout", make<Dropout>(cfg.dropout));
}

// q: (B, H, T, D), k, v: (B, H_kv, Tk, D), key_lengths (B) or undefined -> (B, T, C), then the
// output projection.
Tensor SelfAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                             const Tensor& key_lengths) {
  double p = is_training() ? dropout : 0.0;
  Tensor y = scaled_dot_product_attention(q, k, v, key_lengths, is_causal, kDefaultScale, p);
  int64_t B = q.size(0), T = q.size(2);
  // (B, H, T, D) -> (B, T, H, D) -> (B, T, H D): H D is C, or this rank's share of it.
  y = reshape(transpose(y, 1, 2), {B, T, n_head * head_dim});
  return resid_dropout->forward(c_proj->forward(y));
}

// qkv: (B, T, H D + 2 H_kv D) holds q (H heads), k and v (H_kv heads each) side by side; each is
// cut out as (B, T, heads, D) and viewed as (B, heads, T, D), no copies.
std::vector<Tensor> SelfAttention::heads(const Tensor& x, int64_t offset, const Tensor& at) {
  Tensor qkv = c_attn->forward(x);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = head_dim, q = n_head * D, kv = n_kv_head * D;
  auto part = [&](int64_t start, int64_t width, int64_t h) {
    return transpose(view(slice(qkv, 2, start, start + width), {B, T, h, D}), 1, 2);
  };
  std::vector<Tensor> out{part(0, q, n_head), part(q, kv, n_kv_head), part(q + kv, kv, n_kv_head)};
  if (positions == Positions::Rotary) {  // q and k at positions offset, offset + 1, ... or `at`
    for (size_t i : {0, 1})
      out[i] = at.defined() ? loom::rope(out[i], at, rope) : loom::rope(out[i], offset, rope);
  }
  return out;
}

Tensor SelfAttention::forward(const Tensor& x) {
  LOOM_CHECK(x.dim() == 3 && x.size(2) == n_embd, type_name(), "(n_embd=", n_embd, "): input ",
             describe(x), " should be (B, T, ", n_embd, ")");
  if (n_kv_head != n_head || positions != Positions::Absolute) {
    auto qkv = heads(x, 0);
    return attend(qkv[0], qkv[1], qkv[2], causal);
  }
  // One node from the packed projection to the heads' outputs (Note [Packed attention] in
  // autograd/ops/attention_packed.cpp): on CUDA the backward writes dq, dk, dv into one tensor.
  const double p = is_training() ? dropout : 0.0;
  Tensor y = scaled_dot_product_attention_packed(c_attn->forward(x), n_head, causal, kDefaultScale,
                                                 p);  // (B, T, C)
  return resid_dropout->forward(c_proj->forward(y));
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& key_lengths) {
  if (!key_lengths.defined()) return forward(x);
  LOOM_CHECK(x.dim() == 3 && x.size(2) == n_embd, type_name(), "(n_embd=", n_embd, "): input ",
             describe(x), " should be (B, T, ", n_embd, ")");
  auto qkv = heads(x, 0);  // views of c_attn's output; the packed op takes no key lengths
  return attend(qkv[0], qkv[1], qkv[2], causal, key_lengths);
}

Tensor SelfAttention::forward(const Tensor& x, KVCache& cache, size_t layer) {
  LOOM_CHECK(causal, "SelfAttention: a KV cache needs causal attention (causal is false)");
  LOOM_CHECK(cache.length == 0 || x.size(1) == 1, "CausalSelfAttention: with ", cache.length,
             " cached positions the input must be one position, got ", x.size(1));
  auto qkv = heads(x, cache.length);
  if (cache.k.size() <= layer) cache.k.resize(layer + 1), cache.v.resize(layer + 1);
  Tensor& k = cache.k[layer];
  Tensor& v = cache.v[layer];
  k = k.defined() ? cat({k, qkv[1]}, 2) : contiguous(qkv[1]);  // (B, H_kv, length + T, D)
  v = v.defined() ? cat({v, qkv[2]}, 2) : contiguous(qkv[2]);
  return attend(qkv[0], k, v, /*is_causal=*/cache.length == 0);
}

// Note [Static KV cache] in nn/transformer.h.
Tensor SelfAttention::forward(const Tensor& x, StaticKVCache& cache, size_t layer) {
  LOOM_CHECK(causal, "SelfAttention: a KV cache needs causal attention (causal is false)");
  const int64_t B = x.size(0), T = x.size(1);
  LOOM_CHECK(cache.positions.defined() && cache.positions.size(0) == T,
             "CausalSelfAttention: the static cache was not begun for ", T,
             " positions (the model's forward calls StaticKVCache::begin)");
  auto qkv = heads(x, 0, cache.positions);
  if (cache.k.size() <= layer) cache.k.resize(layer + 1), cache.v.resize(layer + 1);
  Tensor& k = cache.k[layer];
  Tensor& v = cache.v[layer];
  const Shape shape{B, n_kv_head, cache.max_len, head_dim};
  if (!k.defined()) {
    k = zeros(shape, {.dtype = qkv[1].dtype(), .device = x.device()});
    v = zeros(shape, {.dtype = qkv[2].dtype(), .device = x.device()});
  }
  LOOM_CHECK(k.shape() == shape && k.dtype() == qkv[1].dtype(), "CausalSelfAttention: layer ",
             layer, " of the static cache holds ", describe(k), ", this step's keys need ", shape,
             " in ", dtype_name(qkv[1].dtype()));
  if (cache.length == 0) {  // a prompt: its own keys, causally; they fill slots [0, T)
    slice(k, 2, 0, T).copy_(qkv[1]);
    slice(v, 2, 0, T).copy_(qkv[2]);
    return attend(qkv[0], qkv[1], qkv[2], /*is_causal=*/true);
  }
  k.index_copy_(2, cache.position, qkv[1]);  // (B, H_kv, max_len, D) <- (B, H_kv, 1, D) at slot
  v.index_copy_(2, cache.position, qkv[2]);  // `position`, read on the device
  return attend(qkv[0], k, v, /*is_causal=*/false, cache.key_lengths);
}

// ---------------------------------------------------------------- MLP

MLP::MLP(const TransformerConfig& cfg) : Module("MLP") {
  c_fc = register_module("c_fc", make<Linear>(cfg.n_embd, cfg.hidden(), cfg.bias));
  gelu = register_module("gelu", make<GELU>(cfg.gelu_approximate));
  c_proj = register_module("c_proj", make<Linear>(cfg.hidden(), cfg.n_embd, cfg.bias));
  dropout = register_module("dropout", make<Dropout>(cfg.dropout));
}

Tensor MLP::forward(const Tensor& x) {  // (B, T, C) -> (B, T, hidden) -> (B, T, C)
  return dropout(c_proj(gelu(c_fc(x))));
}

// Note [Packed SwiGLU] in nn/transformer.h: gate and up are the two halves of c_fc's output.
SwiGLUMLP::SwiGLUMLP(const TransformerConfig& cfg) : Module("SwiGLUMLP"), hidden(cfg.hidden()) {
  c_fc = register_module("c_fc", make<Linear>(cfg.n_embd, 2 * hidden, cfg.bias));
  c_proj = register_module("c_proj", make<Linear>(hidden, cfg.n_embd, cfg.bias));
  dropout = register_module("dropout", make<Dropout>(cfg.dropout));
}

Tensor SwiGLUMLP::forward(const Tensor& x) {  // (B, T, C) -> (B, T, 2F) -> (B, T, F) -> (B, T, C)
  Tensor gate_up = c_fc(x);
  Tensor gate = slice(gate_up, -1, 0, hidden), up = slice(gate_up, -1, hidden, 2 * hidden);
  return dropout(c_proj->forward(swiglu(gate, up)));
}

// ---------------------------------------------------------------- block

// The children are made one statement at a time, in the order they are named: each Linear's
// init draws from the default generator (as arguments of one call their order would be the
// compiler's).
TransformerBlock::TransformerBlock(const TransformerConfig& cfg)
    : Module("TransformerBlock"), norm_first(cfg.norm_first) {
  ln_1 = register_module("ln_1", make_norm(cfg));
  attn = register_module("attn", make<SelfAttention>(cfg));
  ln_2 = register_module("ln_2", make_norm(cfg));
  mlp = register_module("mlp", make_feed_forward(cfg));
}

TransformerBlock::TransformerBlock(std::string type_name, std::shared_ptr<Module> ln_1_,
                                   std::shared_ptr<SelfAttention> attn_,
                                   std::shared_ptr<Module> ln_2_, std::shared_ptr<Module> mlp_)
    : Module(std::move(type_name)) {
  ln_1 = register_module("ln_1", std::move(ln_1_));
  attn = register_module("attn", std::move(attn_));
  ln_2 = register_module("ln_2", std::move(ln_2_));
  mlp = register_module("mlp", std::move(mlp_));
}

// Note [Post-norm] for the second pair of lines.
template <typename Attend>
Tensor TransformerBlock::around(const Tensor& x_in, const Attend& attend) {
  if (!norm_first) {
    Tensor x = ln_1(x_in + attend(x_in));  // (B, T, C)
    return ln_2(x + mlp(x));
  }
  Tensor x = x_in + attend(ln_1(x_in));  // (B, T, C)
  return x + mlp(ln_2(x));
}

Tensor TransformerBlock::forward(const Tensor& x_in) {
  return around(x_in, [&](const Tensor& h) { return attn(h); });
}

// attn with key lengths, through its forward hooks as attn(x) would be (Note [Forward hooks] in
// nn/module.h).
Tensor TransformerBlock::forward(const Tensor& x_in, const Tensor& key_lengths) {
  if (!key_lengths.defined()) return forward(x_in);
  return around(x_in, [&](const Tensor& h) {
    return attn->call_hooked([&] { return std::vector<Tensor>{attn->forward(h, key_lengths)}; })[0];
  });
}

Tensor TransformerBlock::forward(const Tensor& x_in, KVCache& cache, size_t layer) {
  return around(x_in, [&](const Tensor& h) { return attn->forward(h, cache, layer); });
}

Tensor TransformerBlock::forward(const Tensor& x_in, StaticKVCache& cache, size_t layer) {
  return around(x_in, [&](const Tensor& h) { return attn->forward(h, cache, layer); });
}

// ---------------------------------------------------------------- stack

TransformerStack::TransformerStack(const TransformerConfig& cfg, int64_t n_layer)
    : Sequential("TransformerStack") {
  LOOM_CHECK(n_layer > 0, "TransformerStack: n_layer ", n_layer, " must be positive");
  for (int64_t i = 0; i < n_layer; ++i) push_back(make<TransformerBlock>(cfg));
}

Tensor TransformerStack::forward(const Tensor& x) { return forward(x, Tensor()); }

// Each block checkpointed: one node that keeps its input and runs the block again in backward.
Tensor TransformerStack::forward(const Tensor& x, const Tensor& key_lengths) {
  const bool ckpt = checkpointing && autograd::is_grad_enabled();
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) {
    TransformerBlock* b = block(i).get();
    auto run = [b, key_lengths](const std::vector<Tensor>& in) {  // through b's hooks
      if (!key_lengths.defined()) return (*b)(in[0]);
      return b->call_hooked([&] { return std::vector<Tensor>{b->forward(in[0], key_lengths)}; })[0];
    };
    h = ckpt ? autograd::checkpoint(run, {h}) : run({h});
  }
  return h;
}

Tensor TransformerStack::forward(const Tensor& x, Module& final_norm) {
  return final_norm(forward(x));
}

Tensor TransformerStack::forward(const Tensor& x, Module& final_norm, KVCache& cache) {
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) h = block(i)->forward(h, cache, i);
  return final_norm(h);
}

Tensor TransformerStack::forward(const Tensor& x, Module& final_norm, StaticKVCache& cache) {
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) h = block(i)->forward(h, cache, i);
  return final_norm(h);
}

}  // namespace loom::nn
