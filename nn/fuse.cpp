// nn::fuse and its table of patterns: the one place that says which runs of layers run as one
// fused module. Adding a fusion (docs/adding-an-op.md) is one entry here plus its module in
// nn/fused.h. The transformer models' step is nn/fuse_transformer.cpp, which nn::fuse calls.
// Leaves out: the fused modules themselves (nn/fused.cpp) and their ops (autograd/ops).
#include "nn/fuse.h"

#include <functional>
#include <memory>

#include "nn/fuse_transformer.h"
#include "nn/fused.h"

namespace loom::nn {

namespace {

using Run = std::vector<std::shared_ptr<Module>>;  // consecutive children of a Sequential

// A run of children, each accepted by its test in order, and the fused module that takes the
// run's place (built from the run's modules, which the tests have checked the types of).
struct Pattern {
  const char* name;
  std::vector<bool (*)(const Module&)> parts;
  std::shared_ptr<Module> (*make)(const Run& run);
};

template <typename M>
bool is(const Module& m) {
  return dynamic_cast<const M*>(&m) != nullptr;
}

bool is_pool_2(const Module& m) {
  auto* pool = dynamic_cast<const MaxPool2d*>(&m);
  return pool && is_max_pool_2(*pool);
}

template <typename M>
std::shared_ptr<M> as(const std::shared_ptr<Module>& m) {
  return std::dynamic_pointer_cast<M>(m);
}

// The table. Longer patterns come first: a BatchNorm2d, ReLU, MaxPool2d(2) run is one
// BatchNormReLUMaxPool2d, not a BatchNormReLU2d and a MaxPool2d.
const std::vector<Pattern>& patterns() {
  static const std::vector<Pattern> table = {
      {"BatchNormReLUMaxPool2d",
       {is<BatchNorm2d>, is<ReLU>, is_pool_2},
       [](const Run& r) -> std::shared_ptr<Module> {
         return std::make_shared<BatchNormReLUMaxPool2d>(as<BatchNorm2d>(r[0]), as<ReLU>(r[1]),
                                                         as<MaxPool2d>(r[2]));
       }},
      {"BatchNormReLU2d",
       {is<BatchNorm2d>, is<ReLU>},
       [](const Run& r) -> std::shared_ptr<Module> {
         return std::make_shared<BatchNormReLU2d>(as<BatchNorm2d>(r[0]), as<ReLU>(r[1]));
       }},
      {"LinearReLU",
       {is<Linear>, is<ReLU>},
       [](const Run& r) -> std::shared_ptr<Module> {
         return std::make_shared<LinearReLU>(as<Linear>(r[0]), as<ReLU>(r[1]));
       }},
  };
  return table;
}

// The first pattern that matches s's children from i on, or null.
const Pattern* match_at(const Sequential& s, size_t i) {
  for (const Pattern& p : patterns()) {
    if (i + p.parts.size() > s.size()) continue;
    bool ok = true;
    for (size_t k = 0; k < p.parts.size() && ok; ++k) ok = p.parts[k](*s[i + k]);
    if (ok) return &p;
  }
  return nullptr;
}

// Fuses s's children left to right; prefix: s's dotted path from the model ("" or "features.").
void fuse_children(Sequential& s, const std::string& prefix, std::vector<Fusion>& out) {
  for (size_t i = 0; i < s.size(); ++i) {
    const Pattern* p = match_at(s, i);
    if (!p) continue;
    const size_t n = p->parts.size();
    Run run;
    for (size_t k = 0; k < n; ++k) run.push_back(s[i + k]);
    Fusion f{prefix + std::to_string(i), p->name, {}};
    s.replace(i, p->make(run));
    for (size_t k = 1; k < n; ++k) {
      s.replace(i + k,
                std::make_shared<Identity>(str(run[k]->type_name(), ", fused into ", prefix, i)));
      f.absorbed.push_back(prefix + std::to_string(i + k));
    }
    out.push_back(std::move(f));
    i += n - 1;
  }
}

}  // namespace

std::vector<Fusion> fuse(Module& model) {
  std::vector<Fusion> out;
  std::function<void(Module&, const std::string&)> walk = [&](Module& m,
                                                              const std::string& prefix) {
    for (Fusion& f : fuse_transformer_model(m)) {  // a GPT's or ViT's trunk (nn/fuse_transformer.h)
      f.at = prefix + f.at;
      out.push_back(std::move(f));
    }
    if (auto* s = dynamic_cast<Sequential*>(&m)) fuse_children(*s, prefix, out);
    for (const auto& [name, child] : m.named_children()) walk(*child, prefix + name + ".");
  };
  walk(model, "");
  return out;
}

std::string fusion_summary(const std::vector<Fusion>& fusions) {
  if (fusions.empty()) return "nn::fuse: nothing to fuse";
  std::string s = str("nn::fuse: ", fusions.size(), fusions.size() == 1 ? " fusion:" : " fusions:");
  for (size_t i = 0; i < fusions.size(); ++i) {
    s += str(i ? ", " : " ", fusions[i].at, " ", fusions[i].fused);
    if (fusions[i].absorbed.empty()) continue;
    s += " (+";
    for (const auto& a : fusions[i].absorbed) s += " " + a;
    s += ")";
  }
  return s;
}

}  // namespace loom::nn
