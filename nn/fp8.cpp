// nn::convert_to_fp8 (nn/fp8.h): a depth-first walk that lists the model's Linears in forward
// order, then the rules that decide which run in FP8. Leaves out: the FP8 op itself
// (autograd/ops/fp8_linear.cpp) and Linear's forward (nn/linear.cpp).
#include "nn/fp8.h"

#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include "nn/fused.h"
#include "nn/layers.h"

namespace loom::nn {

namespace {

struct Found {
  std::string at;
  Module* m;
};

// Every module below m in forward order (children in registration order, depth first), each once;
// a fused module's original layers, which are not its children, are walked too. LoRA adapters
// (lora_A, lora_B) are left out.
void walk(Module& m, const std::string& prefix, std::vector<Found>& out,
          std::unordered_set<const Module*>& seen) {
  if (!seen.insert(&m).second) return;
  if (!prefix.empty()) out.push_back({prefix, &m});
  auto child_path = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
  if (auto* fused = dynamic_cast<FusedModule*>(&m))
    for (const auto& part : fused->parts()) walk(*part, prefix, out, seen);
  for (const auto& [name, child] : m.named_children())
    if (name != "lora_A" && name != "lora_B") walk(*child, child_path(name), out, seen);
}

// Why linear l (index i of n Linears) stays in bfloat16, or "" when it can run in FP8.
std::string reason_to_skip(const Linear& l, size_t i, size_t n, const Fp8Options& o) {
  if (typeid(l) != typeid(Linear)) return str("a ", l.type_name(), " runs its own forward");
  if (o.skip_first && i == 0) return "the model's first Linear";
  if (o.skip_last && i + 1 == n) return "the model's last Linear";
  if (l.in_features % 16 != 0 || l.out_features % 16 != 0)
    return str("in_features=", l.in_features, ", out_features=", l.out_features,
               ": not multiples of 16");
  return "";
}

}  // namespace

std::vector<Fp8Choice> convert_to_fp8(Module& model, const Fp8Options& options) {
  std::vector<Found> all;
  std::unordered_set<const Module*> seen;
  walk(model, "", all, seen);
  std::vector<std::pair<std::string, Linear*>> linears;
  for (const auto& f : all)
    if (auto* l = dynamic_cast<Linear*>(f.m)) linears.emplace_back(f.at, l);
  std::vector<Fp8Choice> out;
  for (size_t i = 0; i < linears.size(); ++i) {
    auto& [at, l] = linears[i];
    std::string why = reason_to_skip(*l, i, linears.size(), options);
    if (why.empty()) l->fp8 = true;
    out.push_back({at, why});
  }
  return out;
}

std::string fp8_summary(const std::vector<Fp8Choice>& choices) {
  size_t converted = 0;
  std::ostringstream kept;
  for (const auto& c : choices) {
    if (c.skipped_because.empty()) {
      ++converted;
      continue;
    }
    kept << (kept.tellp() > 0 ? ", " : "") << (c.at.empty() ? "(the model)" : c.at) << " ("
         << c.skipped_because << ")";
  }
  std::string s = str("nn::convert_to_fp8: ", converted, " of ", choices.size(),
                      " Linears in FP8 (tensorwise)");
  if (kept.tellp() > 0) s += "; kept in bf16: " + kept.str();
  return s;
}

}  // namespace loom::nn
