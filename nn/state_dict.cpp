// StateDict helpers: lookup by name, scalar entries, and name lists for error messages.
// Leaves out: the checks of what an owner expects (Module, Optimizer and LRScheduler do those).
#include "nn/state_dict.h"

#include "autograd/ops/factory.h"

namespace loom::nn {

const Tensor* find(const StateDict& sd, const std::string& name) {
  for (const auto& [n, t] : sd)
    if (n == name) return &t;
  return nullptr;
}

std::vector<std::string> names(const StateDict& sd) {
  std::vector<std::string> out;
  out.reserve(sd.size());
  for (const auto& e : sd) out.push_back(e.first);
  return out;
}

Tensor scalar_entry(double v) { return scalar_tensor(v, {.dtype = kF64}); }

double scalar_value(const StateDict& sd, const std::string& name, const char* owner) {
  const Tensor* t = find(sd, name);
  LOOM_CHECK(t != nullptr, owner, ".load_state_dict: missing entry \"", name, "\"");
  LOOM_CHECK(t->defined() && t->numel() == 1, owner, ".load_state_dict: entry \"", name,
             "\" should hold one value, got ", t->defined() ? describe(*t) : "an undefined tensor");
  return t->item();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

}  // namespace loom::nn
