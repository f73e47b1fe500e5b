// The fused transformer modules (nn/fused_transformer.h): each built from its plain module,
// sharing its children and tensors, each forward the fused ops of Note [The fused transformer].
// Leaves out: the pass that swaps them into a model (nn/fuse_transformer.cpp).
#include "nn/fused_transformer.h"

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/linalg.h"

namespace loom::nn {

// ---------------------------------------------------------------- FusedAddLayerNorm

FusedAddLayerNorm::FusedAddLayerNorm(std::shared_ptr<LayerNorm> l)
    : FusedModule("FusedAddLayerNorm", {l}), ln(std::move(l)) {}

Tensor FusedAddLayerNorm::forward(const Tensor& x) {
  if (autograd::is_anomaly_enabled()) return composite(x);
  return ln->forward(x, amp::autocast_dtype());
}

std::pair<Tensor, Tensor> FusedAddLayerNorm::forward_add(const Tensor& x, const Tensor& branch) {
  if (autograd::is_anomaly_enabled()) {
    Tensor r = x + branch;
    return {r, composite(r)};
  }
  return ln->forward_add(x, branch, amp::autocast_dtype());
}

// ---------------------------------------------------------------- LinearGELULinear

LinearGELULinear::LinearGELULinear(std::shared_ptr<MLP> m)
    : Module("LinearGELULinear"), mlp(std::move(m)) {
  LOOM_CHECK(mlp != nullptr, "LinearGELULinear: the MLP is null");
  LOOM_CHECK(mlp->gelu->approximate == "tanh", "LinearGELULinear: the MLP's GELU is '",
             mlp->gelu->approximate, "', gelu_mlp fuses the tanh GELU only");
  c_fc = register_module("c_fc", mlp->c_fc);
  c_proj = register_module("c_proj", mlp->c_proj);
  dropout = register_module("dropout", mlp->dropout);
  Module::train(mlp->is_training());
}

Tensor LinearGELULinear::forward(const Tensor& x) {  // (B, T, C) -> (B, T, hidden) -> (B, T, C)
  // Anomaly mode names each op; low-rank adapters (nn/lora.h) add to the products, which
  // gelu_mlp does not see, and FP8 Linears (nn/fp8.h) run products gelu_mlp does not have: all
  // run the plain MLP.
  if (autograd::is_anomaly_enabled() || c_fc->lora_A || c_proj->lora_A || c_fc->fp8 || c_proj->fp8)
    return (*mlp)(x);
  LOOM_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == c_fc->in_features,
             "LinearGELULinear(in_features=", c_fc->in_features, "): input ",
             x.defined() ? describe(x) : std::string("undefined"), " should end in ",
             c_fc->in_features, " features");
  return dropout->forward(gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias));
}

void LinearGELULinear::train(bool on) {
  Module::train(on);
  mlp->train(on);
}

std::string LinearGELULinear::extra_repr() const {
  return "c_fc, GELU(approximate='tanh') in its epilogue, c_proj: one op (gelu_mlp)";
}

// ---------------------------------------------------------------- FusedTransformerBlock

namespace {

std::shared_ptr<FusedAddLayerNorm> fused_norm(const std::shared_ptr<Module>& m) {
  auto ln = std::dynamic_pointer_cast<LayerNorm>(m);
  LOOM_CHECK(ln != nullptr, "FusedTransformerBlock: its norms must be LayerNorms, got ",
             m ? m->type_name() : std::string("null"));
  return std::make_shared<FusedAddLayerNorm>(ln);
}

// The MLP with the tanh GELU as a LinearGELULinear; any other MLP as it is.
std::shared_ptr<Module> fused_mlp(const std::shared_ptr<Module>& m) {
  auto mlp = std::dynamic_pointer_cast<MLP>(m);
  if (mlp && mlp->gelu->approximate == "tanh") return std::make_shared<LinearGELULinear>(mlp);
  return m;
}

}  // namespace

FusedTransformerBlock::FusedTransformerBlock(const TransformerBlock& plain)
    : TransformerBlock("FusedTransformerBlock", fused_norm(plain.ln_1), plain.attn,
                       fused_norm(plain.ln_2), fused_mlp(plain.mlp)),
      norm_1(std::dynamic_pointer_cast<FusedAddLayerNorm>(ln_1)),
      norm_2(std::dynamic_pointer_cast<FusedAddLayerNorm>(ln_2)) {
  Module::train(plain.is_training());
}

bool FusedTransformerBlock::fusable(const TransformerBlock& plain) {
  return plain.norm_first &&  // post-norm stays plain (Note [Post-norm] in nn/transformer.h)
         dynamic_cast<const LayerNorm*>(plain.ln_1.get()) != nullptr &&
         dynamic_cast<const LayerNorm*>(plain.ln_2.get()) != nullptr;
}

std::pair<Tensor, Tensor> FusedTransformerBlock::parts(const Tensor& x_in, const Tensor& pending) {
  Tensor x = x_in, h;
  if (pending.defined())
    std::tie(x, h) = norm_1->forward_add(x_in, pending);  // x = x_in + pending
  else
    h = (*norm_1)(x_in);
  auto [r, h2] = norm_2->forward_add(x, attn(h));  // r = x + attn(h)
  return {r, mlp(h2)};
}

std::pair<Tensor, Tensor> FusedTransformerBlock::forward_parts(const Tensor& x,
                                                               const Tensor& pending) {
  std::vector<Tensor> out = call_hooked([&] {
    auto [r, m] = parts(x, pending);
    return std::vector<Tensor>{r, m};
  });
  return {out[0], out[1]};
}

// operator() runs the hooks around this.
Tensor FusedTransformerBlock::forward(const Tensor& x) {
  auto [r, m] = parts(x, Tensor());
  return r + m;
}

Tensor FusedTransformerBlock::forward(const Tensor& x, KVCache& cache, size_t layer) {
  auto [r, h] = norm_2->forward_add(x, attn->forward((*norm_1)(x), cache, layer));
  return r + mlp(h);
}

std::string FusedTransformerBlock::extra_repr() const {
  return "the attention's residual add in ln_2; the MLP's in the next block's ln_1";
}

// ---------------------------------------------------------------- FusedTransformerStack

FusedTransformerStack::FusedTransformerStack(const TransformerStack& plain)
    : TransformerStack("FusedTransformerStack") {
  for (size_t i = 0; i < plain.size(); ++i)
    push_back(std::make_shared<FusedTransformerBlock>(*plain.block(i)));
  checkpointing = plain.checkpointing;
  Module::train(plain.is_training());
}

bool FusedTransformerStack::fusable(const TransformerStack& plain) {
  for (size_t i = 0; i < plain.size(); ++i)
    if (!FusedTransformerBlock::fusable(*plain.block(i))) return false;
  return plain.size() > 0;
}

// x: (B, T, C) -> final_norm(the blocks' output): (B, T, C). r is the residual stream, pending the
// last MLP output not yet added to it.
Tensor FusedTransformerStack::forward(const Tensor& x, Module& final_norm) {
  if (checkpointing && autograd::is_grad_enabled()) return TransformerStack::forward(x, final_norm);
  Tensor r = x, pending;
  for (size_t i = 0; i < size(); ++i)
    std::tie(r, pending) = at<FusedTransformerBlock>(i)->forward_parts(r, pending);
  if (auto* norm = dynamic_cast<FusedAddLayerNorm*>(&final_norm))
    return norm->forward_add(r, pending).second;
  return final_norm(r + pending);
}

std::string FusedTransformerStack::extra_repr() const {
  return "each block's last residual add in the next norm: the next block's ln_1, the last "
         "block's in the final norm";
}

}  // namespace loom::nn
