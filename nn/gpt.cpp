// GPT-2's modules: attention, MLP, block and the model (nn/gpt.h), with GPT-2's sizes and init.
// Leaves out: generation (nn/gpt_sample.cpp) and the training loop (examples/train_gpt.cpp).
#include "nn/gpt.h"

#include <cmath>

#include "autograd/amp/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/ops.h"
#include "nn/init.h"

namespace loom::nn {

// ---------------------------------------------------------------- config

GPTConfig GPTConfig::gpt2(const std::string& depth) {
  GPTConfig c;
  if (depth == "d12") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (depth == "d24") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (depth == "d36") {
    c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
  } else if (depth == "d48") {
    c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  } else {
    LOOM_FAIL("GPTConfig::gpt2: unknown depth \"", depth, "\" (d12, d24, d36 or d48)");
  }
  return c;
}

void GPTConfig::check() const {
  LOOM_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
             "GPTConfig: every size must be positive (vocab_size ", vocab_size, ", block_size ",
             block_size, ", n_layer ", n_layer, ", n_head ", n_head, ", n_embd ", n_embd, ")");
  LOOM_CHECK(n_embd % n_head == 0, "GPTConfig: n_embd ", n_embd, " is not divisible by n_head ",
             n_head);
  LOOM_CHECK(dropout >= 0.0 && dropout < 1.0, "GPTConfig: dropout ", dropout, " is not in [0, 1)");
}

// ---------------------------------------------------------------- attention

CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg)
    : Module(cfg.causal ? "CausalSelfAttention" : "SelfAttention"),
      n_head(cfg.n_head),
      n_embd(cfg.n_embd),
      dropout(cfg.dropout),
      causal(cfg.causal) {
  c_attn = register_module("c_attn", make<Linear>(n_embd, 3 * n_embd, cfg.bias));
  c_proj = register_module("c_proj", make<Linear>(n_embd, n_embd, cfg.bias));
  resid_dropout = register_module("resid_dropout", make<Dropout>(cfg.dropout));
}

// q, k, v: (B, H, T, D) -> (B, T, C), then the output projection.
Tensor CausalSelfAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  double p = is_training() ? dropout : 0.0;
  Tensor y = scaled_dot_product_attention(q, k, v, causal, kDefaultScale, p);
  int64_t B = q.size(0), T = q.size(2);
  y = reshape(transpose(y, 1, 2), {B, T, n_embd});  // (B, H, T, D) -> (B, T, H, D) -> (B, T, C)
  return resid_dropout->forward(c_proj->forward(y));
}

namespace {
// qkv: (B, T, 3C) -> q, k, v as (B, H, T, D) views of it.
std::vector<Tensor> split_heads(const Tensor& qkv, int64_t n_head) {
  int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  Tensor five = view(qkv, {B, T, 3, n_head, C / n_head});
  std::vector<Tensor> out;
  for (int64_t i = 0; i < 3; ++i) out.push_back(transpose(select(five, 2, i), 1, 2));
  return out;
}
}  // namespace

Tensor CausalSelfAttention::forward(const Tensor& x) {
  LOOM_CHECK(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention(n_embd=", n_embd,
             "): input ", describe(x), " should be (B, T, ", n_embd, ")");
  // One node from the packed projection to the heads' outputs (Note [Packed attention] in
  // autograd/ops/attention_packed.cpp): on CUDA the backward writes dq, dk, dv into one tensor.
  const double p = is_training() ? dropout : 0.0;
  Tensor y = scaled_dot_product_attention_packed(c_attn->forward(x), n_head, causal, kDefaultScale,
                                                 p);  // (B, T, C)
  return resid_dropout->forward(c_proj->forward(y));
}

Tensor CausalSelfAttention::forward(const Tensor& x, KVCache& cache, size_t layer) {
  LOOM_CHECK(causal,
             "SelfAttention: a KV cache needs causal attention (GPTConfig::causal is false)");
  LOOM_CHECK(cache.length == 0 || x.size(1) == 1, "CausalSelfAttention: with ", cache.length,
             " cached positions the input must be one position, got ", x.size(1));
  auto qkv = split_heads(c_attn->forward(x), n_head);
  if (cache.k.size() <= layer) cache.k.resize(layer + 1), cache.v.resize(layer + 1);
  Tensor& k = cache.k[layer];
  Tensor& v = cache.v[layer];
  k = k.defined() ? cat({k, qkv[1]}, 2) : contiguous(qkv[1]);  // (B, H, length + T, D)
  v = v.defined() ? cat({v, qkv[2]}, 2) : contiguous(qkv[2]);
  return attend(qkv[0], k, v, /*causal=*/cache.length == 0);
}

// ---------------------------------------------------------------- MLP and block

MLP::MLP(const GPTConfig& cfg) : Module("MLP") {
  c_fc = register_module("c_fc", make<Linear>(cfg.n_embd, 4 * cfg.n_embd, cfg.bias));
  gelu = register_module("gelu", make<GELU>(cfg.gelu_approximate));
  c_proj = register_module("c_proj", make<Linear>(4 * cfg.n_embd, cfg.n_embd, cfg.bias));
  dropout = register_module("dropout", make<Dropout>(cfg.dropout));
}

// With the tanh GELU, c_fc, the GELU and c_proj are one fused op (Note [Fused MLP] in
// autograd/ops/linalg.cpp: on CUDA the bias and GELU in cuBLASLt's forward epilogue, the GELU's
// backward in the epilogue of the GEMM that makes its gradient), and `gelu` stays a child (the
// printed model, the composite that test_gpt's reference writes out) but does not run here. The
// exact GELU has no fused epilogue: it runs between the two Linears.
Tensor MLP::forward(const Tensor& x) {
  if (gelu->approximate == "tanh") {  // (B, T, C) -> (B, T, 4C) -> (B, T, C)
    LOOM_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == c_fc->in_features,
               "MLP(n_embd=", c_fc->in_features, "): input ",
               x.defined() ? describe(x) : std::string("undefined"), " should end in ",
               c_fc->in_features, " features");
    return dropout->forward(gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias));
  }
  return dropout->forward(c_proj->forward(gelu->forward(c_fc->forward(x))));
}

TransformerBlock::TransformerBlock(const GPTConfig& cfg) : Module("TransformerBlock") {
  LayerNormOptions ln{.eps = cfg.ln_eps, .bias = cfg.bias};
  ln_1 = register_module("ln_1", make<LayerNorm>(cfg.n_embd, ln));
  attn = register_module("attn", make<CausalSelfAttention>(cfg));
  ln_2 = register_module("ln_2", make<LayerNorm>(cfg.n_embd, ln));
  mlp = register_module("mlp", make<MLP>(cfg));
}

// Under autocast both layer norms write the Linear's dtype themselves, and each does the residual
// add before it (Note [Layer norm with the residual add] in autograd/ops/layer_norm.cpp): ln_2
// the attention's, ln_1 the previous block's MLP's. The values of x + attn(ln_1(x)), then
// + mlp(ln_2(.)), in fewer passes.
std::pair<Tensor, Tensor> TransformerBlock::parts(const Tensor& x_in, const Tensor& pending) {
  const std::optional<DType> low = amp::autocast_dtype();
  Tensor x = x_in, h;
  if (pending.defined())
    std::tie(x, h) = ln_1->forward_add(x_in, pending, low);  // x = x_in + pending
  else
    h = ln_1->forward(x_in, low);
  auto [r, h2] = ln_2->forward_add(x, attn->forward(h), low);
  return {r, mlp->forward(h2)};
}

// The block's forward hooks (Note [Forward hooks]) see both parts as its outputs.
std::pair<Tensor, Tensor> TransformerBlock::forward_parts(const Tensor& x, const Tensor& pending) {
  std::vector<Tensor> out = call_hooked([&] {
    auto [r, m] = parts(x, pending);
    return std::vector<Tensor>{r, m};
  });
  return {out[0], out[1]};
}

// operator() runs the hooks around this.
Tensor TransformerBlock::forward(const Tensor& x) {
  auto [r, m] = parts(x, Tensor());
  return r + m;
}

Tensor TransformerBlock::forward(const Tensor& x, KVCache& cache, size_t layer) {
  const std::optional<DType> low = amp::autocast_dtype();
  auto [r, h] = ln_2->forward_add(x, attn->forward(ln_1->forward(x, low), cache, layer), low);
  return r + mlp->forward(h);
}

// ---------------------------------------------------------------- GPT

GPT::GPT(GPTConfig cfg) : Module("GPT"), config(cfg) {
  config.check();
  wte = register_module("wte", make<Embedding>(cfg.vocab_size, cfg.n_embd));
  wpe = register_module("wpe", make<Embedding>(cfg.block_size, cfg.n_embd));
  drop = register_module("drop", make<Dropout>(cfg.dropout));
  h = register_module("h", make<Sequential>());
  for (int64_t i = 0; i < cfg.n_layer; ++i) h->push_back(make<TransformerBlock>(cfg));
  ln_f = register_module("ln_f", make<LayerNorm>(cfg.n_embd, LayerNormOptions{.bias = cfg.bias}));
  lm_head = register_module("lm_head", make<Linear>(cfg.n_embd, cfg.vocab_size, false));
  lm_head->weight = wte->weight;  // Note [Tied embedding]: one tensor, listed under wte.weight
  init_weights();
}

void GPT::init_weights() {
  double proj_std = 0.02 / std::sqrt(2.0 * double(config.n_layer));
  for (const auto& [name, p] : named_parameters()) {
    bool is_proj = name.ends_with("c_proj.weight");
    if (name.ends_with(".bias"))
      init::zeros_(p);
    else if (name.starts_with("ln_") || name.find(".ln_") != std::string::npos)
      init::ones_(p);  // LayerNorm weights
    else
      init::normal_(p, 0.0, is_proj ? proj_std : 0.02);
  }
}

std::vector<std::shared_ptr<TransformerBlock>> GPT::blocks() const {
  std::vector<std::shared_ptr<TransformerBlock>> out;
  for (size_t i = 0; i < h->size(); ++i) out.push_back(h->at<TransformerBlock>(i));
  return out;
}

Tensor GPT::embed(const Tensor& idx, int64_t start) {
  LOOM_CHECK(idx.dim() == 2 && idx.dtype() == kI64, "GPT: input ", describe(idx),
             " should be (B, T) int64 token ids");
  int64_t T = idx.size(1);
  LOOM_CHECK(start + T <= config.block_size, "GPT: ", start + T,
             " positions exceed the context of ", config.block_size, " (block_size)");
  Tensor pos =
      arange(double(start), double(start + T), 1.0, {.dtype = kI64, .device = idx.device()});
  return drop->forward(wte->forward(idx) + wpe->forward(pos));  // (B, T, C) + (T, C)
}

Tensor GPT::forward(const Tensor& idx) {
  return lm_head->forward(hidden(idx));  // (B, T, V)
}

// Each block's last residual add is done by the next layer norm (TransformerBlock::forward_parts).
Tensor GPT::hidden(const Tensor& idx) {
  Tensor x = embed(idx, 0), pending;  // (B, T, C)
  if (checkpoint_blocks_ && autograd::is_grad_enabled()) return hidden_checkpointed(x);
  for (const auto& block : blocks()) std::tie(x, pending) = block->forward_parts(x, pending);
  return pending.defined() ? ln_f->forward_add(x, pending, amp::autocast_dtype()).second
                           : ln_f->forward(x, amp::autocast_dtype());
}

// x: (B, T, C) -> ln_f's output; each block one checkpoint node (its input kept, the rest
// recomputed).
Tensor GPT::hidden_checkpointed(Tensor x) {
  for (const auto& block : blocks())
    x = autograd::checkpoint(
        [b = block.get()](const std::vector<Tensor>& in) { return (*b)(in[0]); }, {x});
  return ln_f->forward(x, amp::autocast_dtype());
}

Tensor GPT::forward(const Tensor& idx, KVCache& cache) {
  Tensor x = embed(idx, cache.length);
  auto bs = blocks();
  for (size_t i = 0; i < bs.size(); ++i) x = bs[i]->forward(x, cache, i);
  cache.length += idx.size(1);
  return lm_head->forward(ln_f->forward(x, amp::autocast_dtype()));
}

// The head and the loss as one op (Note [The classifier in one node] in autograd/ops/linalg.cpp):
// the logits never leave it.
Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  LOOM_CHECK(targets.shape() == idx.shape(), "GPT::loss: targets ", describe(targets),
             " should have the input's shape ", idx.shape());
  return linear_cross_entropy(hidden(idx), lm_head->weight, targets, Reduction::Mean, 0.0, -1);
}

int64_t GPT::num_parameters(bool include_position_table) const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return include_position_table ? n : n - wpe->weight.numel();
}

double GPT::flops_per_token(int64_t T) const {
  double N = double(num_parameters(false));
  double L = double(config.n_layer), H = double(config.n_head);
  double D = double(config.n_embd / config.n_head);
  return 6.0 * N + 12.0 * L * H * D * double(T);
}

}  // namespace loom::nn
