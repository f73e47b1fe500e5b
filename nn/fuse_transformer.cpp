// nn::fuse's transformer step (nn/fuse_transformer.h): which children of which models become the
// fused transformer modules. Adding a transformer model to it is one overload and one line of
// fuse_transformer_model.
// Leaves out: the fused modules themselves (nn/fused_transformer.cpp).
#include "nn/fuse_transformer.h"

#include <memory>
#include <string>

#include "nn/fused_transformer.h"

namespace loom::nn {

namespace {

// The name under which `model` holds `child`.
std::string child_name(const Module& model, const Module* child) {
  for (const auto& [name, c] : model.named_children())
    if (c.get() == child) return name;
  LOOM_FAIL(model.type_name(),
            ": nn::fuse_transformer was given a module that is not its child (a ",
            child ? child->type_name() : std::string("null"), ")");
}

}  // namespace

std::vector<Fusion> fuse_transformer(Module& model, ModuleHolder<TransformerStack>& stack,
                                     ModuleHolder<Module>& final_norm) {
  if (!stack || dynamic_cast<FusedTransformerStack*>(stack.get()) ||
      !FusedTransformerStack::fusable(*stack))
    return {};
  auto ln = std::dynamic_pointer_cast<LayerNorm>(final_norm);
  const std::string s = child_name(model, stack.get()), n = ln ? child_name(model, ln.get()) : "";
  auto fused = std::make_shared<FusedTransformerStack>(*stack);
  model.replace_child(s, fused);
  stack = fused;
  std::vector<Fusion> out{{s, fused->type_name(), {}}};
  for (size_t i = 0; i < fused->size(); ++i)
    out.push_back({str(s, ".", i), (*fused)[i]->type_name(), {}});
  if (ln) {
    auto norm = std::make_shared<FusedAddLayerNorm>(ln);
    model.replace_child(n, norm);
    final_norm = norm;
    out.push_back({n, norm->type_name(), {}});
  }
  return out;
}

std::vector<Fusion> fuse_transformer(GPT& model) {
  return fuse_transformer(model, model.h, model.ln_f);
}

std::vector<Fusion> fuse_transformer(VisionTransformer& model) {
  return fuse_transformer(model, model.blocks, model.norm);
}

std::vector<Fusion> fuse_transformer_model(Module& m) {
  if (auto* gpt = dynamic_cast<GPT*>(&m)) return fuse_transformer(*gpt);
  if (auto* vit = dynamic_cast<VisionTransformer*>(&m)) return fuse_transformer(*vit);
  return {};
}

}  // namespace loom::nn
