// LoRA adapters: apply, forward's delta, merge. See lora.h (Note [LoRA]).
#include "nn/lora.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/ops.h"
#include "nn/init.h"

namespace loom::nn {

void Linear::add_lora(int64_t rank, double alpha, double dropout) {
  LOOM_CHECK(!lora_A, "apply_lora: this Linear(in_features=", in_features,
             ", out_features=", out_features, ") already has adapters");
  LOOM_CHECK(rank >= 1 && rank <= std::min(in_features, out_features), "apply_lora: rank ", rank,
             " must be in [1, ", std::min(in_features, out_features), "] for a Linear of ",
             in_features, " -> ", out_features);
  LOOM_CHECK(alpha > 0, "apply_lora: alpha ", alpha, " must be positive");
  LOOM_CHECK(dropout >= 0 && dropout < 1, "apply_lora: dropout ", dropout, " is outside [0, 1)");
  auto a = std::make_shared<Linear>(in_features, rank, false);  // Kaiming-uniform, as PEFT's A
  auto b = std::make_shared<Linear>(rank, out_features, false);
  {
    NoGradGuard g;
    init::zeros_(b->weight);  // B = 0: the adapted model starts as the base model
  }
  a->to(weight.device(), weight.dtype());
  b->to(weight.device(), weight.dtype());
  lora_A = register_module("lora_A", a);
  lora_B = register_module("lora_B", b);
  lora_scale = alpha / double(rank);
  lora_dropout = dropout;
}

void Linear::remove_lora() {
  remove_child("lora_A");
  remove_child("lora_B");
  lora_A.reset(), lora_B.reset();
  lora_scale = lora_dropout = 0.0;
}

Tensor lora_delta(const Linear& layer, const Tensor& x) {
  Tensor in = layer.lora_dropout > 0 ? dropout(x, layer.lora_dropout, layer.is_training()) : x;
  return layer.lora_B->forward(layer.lora_A->forward(in)) * layer.lora_scale;
}

namespace {
// Every Linear of `model` with its path, adapters' own Linears left out.
std::vector<std::pair<std::string, Linear*>> linears(const Module& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (const auto& [name, m] : model.named_modules()) {
    auto* l = dynamic_cast<Linear*>(const_cast<Module*>(m.get()));
    const std::string last = name.substr(name.rfind('.') + 1);
    if (l && last != "lora_A" && last != "lora_B") out.push_back({name, l});
  }
  return out;
}
}  // namespace

std::vector<std::string> apply_lora(Module& model, const LoRAOptions& o) {
  std::vector<std::string> adapted;
  for (auto& [name, l] : linears(model)) {
    const std::string last = name.substr(name.rfind('.') + 1);
    if (!o.targets.empty() &&
        std::find(o.targets.begin(), o.targets.end(), last) == o.targets.end())
      continue;
    l->add_lora(o.rank, o.alpha, o.dropout);
    adapted.push_back(name);
  }
  std::string wanted;
  for (const auto& t : o.targets) wanted += (wanted.empty() ? "" : ", ") + t;
  LOOM_CHECK(!adapted.empty(), "apply_lora: no Linear of ", model.type_name(),
             " is called any of [", wanted, "]");
  const std::vector<Tensor> mine = lora_parameters(model);
  for (Tensor p : model.parameters())  // freeze the base (Note [LoRA])
    if (std::none_of(mine.begin(), mine.end(), [&](const Tensor& a) { return a.is_same(p); }))
      p.requires_grad_(false);
  return adapted;
}

std::vector<Tensor> lora_parameters(const Module& model) {
  std::vector<Tensor> out;
  for (auto& [name, l] : linears(model))
    if (l->lora_A) out.insert(out.end(), {l->lora_A->weight, l->lora_B->weight});
  return out;
}

int64_t merge_lora(Module& model) {
  int64_t merged = 0;
  for (auto& [name, l] : linears(model)) {
    if (!l->lora_A) continue;
    NoGradGuard g;
    const DType wide = l->weight.dtype() == kF64 ? kF64 : kF32;
    Tensor delta = matmul(l->lora_B->weight.to(wide), l->lora_A->weight.to(wide)) * l->lora_scale;
    l->weight.copy_((l->weight.to(wide) + delta).to(l->weight.dtype()));
    l->remove_lora();
    ++merged;
  }
  for (Tensor p : model.parameters()) p.requires_grad_(true);
  return merged;
}

}  // namespace loom::nn
