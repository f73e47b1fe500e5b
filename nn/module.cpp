// Module: registration, dotted-name traversal, state_dict loading with one error listing every
// problem, train/eval, to(device/dtype) and zero_grad.
// Leaves out: any layer (nn/linear.cpp, nn/conv.cpp, ...).
#include "nn/module.h"

#include <sstream>
#include <unordered_map>

#include "autograd/anomaly.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/shape.h"

namespace loom::nn {

Tensor Module::forward(const Tensor&) {
  LOOM_FAIL(type_name_, ": forward(x) with one input is not defined for this module");
}

Tensor Module::loss(const Tensor&, const Tensor&) {
  LOOM_FAIL(type_name_,
            ": loss(x, y) is not defined for this module (has_loss() is false); "
            "take a loss of forward(x) instead");
}

namespace {
thread_local const Module* t_calling = nullptr;  // the module whose operator() runs (anomaly mode)
}  // namespace

void Module::set_forward_hooks(ForwardHooks hooks) {
  LOOM_CHECK(hooks_ == nullptr, type_name_,
             ".set_forward_hooks: this module already has forward hooks (one owner at a time: is "
             "it wrapped twice?)");
  hooks_ = std::make_unique<ForwardHooks>(std::move(hooks));
}

std::vector<Tensor> Module::call_hooked(const std::function<std::vector<Tensor>()>& body) {
  if (!hooks_) return body();
  ForwardHooks& h = *hooks_;  // stays put while body runs (the hooks own no module)
  if (h.before) h.before(*this);
  std::vector<Tensor> out = body();
  if (h.after) h.after(*this, out);
  return out;
}

Tensor Module::operator()(const Tensor& x) {
  if (hooks_) return call_hooked([&] { return std::vector<Tensor>{forward_named(x)}; })[0];
  return forward_named(x);
}

Tensor Module::forward_named(const Tensor& x) {
  if (!autograd::is_anomaly_enabled()) return forward(x);
  // Anomaly mode: name this call "<name in the calling module> (<type>)" in the scope path.
  std::string label = type_name_;
  if (t_calling)
    for (const auto& [name, child] : t_calling->named_children())
      if (child.get() == this) label = name + " (" + type_name_ + ")";
  autograd::AnomalyScope scope(label);
  const Module* outer = t_calling;
  t_calling = this;
  struct Restore {
    const Module* m;
    ~Restore() { t_calling = m; }
  } restore{outer};
  return forward(x);
}

// ---------------------------------------------------------------- registration

void Module::check_new_name(const std::string& name) const {
  LOOM_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_,
             ": a parameter, buffer or submodule name must be non-empty and contain no '.', got \"",
             name, "\"");
  auto taken = [&](const auto& list) {
    for (const auto& e : list)
      if constexpr (std::is_same_v<std::decay_t<decltype(e)>, Entry>) {
        if (e.name == name) return true;
      } else {
        if (e.first == name) return true;
      }
    return false;
  };
  LOOM_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": the name \"",
             name, "\" is already registered");
}

Tensor& Module::register_parameter(const std::string& name, Tensor& t, bool requires_grad) {
  check_new_name(name);
  LOOM_CHECK(t.defined(), type_name_, ".register_parameter(\"", name,
             "\"): the tensor is undefined");
  LOOM_CHECK(t.is_leaf(), type_name_, ".register_parameter(\"", name,
             "\"): a parameter must be a leaf tensor (use detach())");
  if (requires_grad) t.requires_grad_(true);
  t.set_name(name);
  params_.push_back({name, &t, true});
  return t;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& t, bool persistent) {
  check_new_name(name);
  LOOM_CHECK(t.defined(), type_name_, ".register_buffer(\"", name, "\"): the tensor is undefined");
  buffers_.push_back({name, &t, persistent});
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  LOOM_CHECK(m != nullptr, type_name_, ".register_module(\"", name, "\"): the module is null");
  LOOM_CHECK(m.get() != this, type_name_, ".register_module(\"", name,
             "\"): a module cannot contain itself");
  m->set_parameter_names(name + ".");
  children_.emplace_back(name, std::move(m));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  LOOM_CHECK(m != nullptr, type_name_, ".replace_child(\"", name, "\"): the module is null");
  LOOM_CHECK(m.get() != this, type_name_, ".replace_child(\"", name,
             "\"): a module cannot contain itself");
  for (auto& [n, c] : children_)
    if (n == name) {
      c = std::move(m);
      return;
    }
  LOOM_FAIL(type_name_, ".replace_child: there is no child called \"", name, "\"");
}

void Module::remove_child(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      children_.erase(it);
      return;
    }
  LOOM_FAIL(type_name_, ".remove_child: there is no child called \"", name, "\"");
}

void Module::share_members_of(Module& inner) {
  LOOM_CHECK(&inner != this, type_name_,
             ".share_members_of: a module cannot share its own members");
  for (const auto& e : inner.params_) {
    check_new_name(e.name);
    params_.push_back(e);
  }
  for (const auto& e : inner.buffers_) {
    check_new_name(e.name);
    buffers_.push_back(e);
  }
  for (const auto& [n, c] : inner.children_) {
    check_new_name(n);
    children_.emplace_back(n, c);
  }
}

// Names each parameter with its dotted path below the module that registered this one, so
// that errors far away (DDP, optimizers) can say which parameter they mean. Re-run whenever
// the module is registered one level further down.
void Module::set_parameter_names(const std::string& prefix) {
  std::unordered_set<const TensorImpl*> seen;  // a tied tensor keeps its first name
  set_parameter_names(prefix, seen);
}

void Module::set_parameter_names(const std::string& prefix,
                                 std::unordered_set<const TensorImpl*>& seen) {
  for (auto& e : params_)
    if (seen.insert(e.t->impl()).second) e.t->set_name(prefix + e.name);
  for (auto& [n, c] : children_) c->set_parameter_names(prefix + n + ".", seen);
}

// ---------------------------------------------------------------- traversal

// Pre-order walk; a tensor already listed (tied weights) is skipped: `seen` spans the whole walk.
void Module::collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out,
                     std::unordered_set<const TensorImpl*>& seen) const {
  for (const auto& e : params ? params_ : buffers_)
    if (seen.insert(e.t->impl()).second) out.emplace_back(prefix + e.name, *e.t);
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, true, out, seen);
}

NamedTensors Module::collect(bool params, bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", params, recurse, out, seen);
  return out;
}

namespace {
std::vector<Tensor> tensors_of(const NamedTensors& named) {
  std::vector<Tensor> out;
  for (const auto& [n, t] : named) out.push_back(t);
  return out;
}
}  // namespace

NamedTensors Module::named_parameters(bool recurse) const { return collect(true, recurse); }
std::vector<Tensor> Module::parameters(bool recurse) const {
  return tensors_of(named_parameters(recurse));
}
NamedTensors Module::named_buffers(bool recurse) const { return collect(false, recurse); }
std::vector<Tensor> Module::buffers(bool recurse) const {
  return tensors_of(named_buffers(recurse));
}

std::vector<std::pair<std::string, std::shared_ptr<const Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<const Module>>> out;
  // The root is not owned by a shared_ptr we can see here; give it a non-owning one.
  out.emplace_back("", std::shared_ptr<const Module>(this, [](const Module*) {}));
  for (size_t i = 0; i < out.size(); ++i) {
    const auto [prefix, m] = out[i];
    for (const auto& [n, c] : m->children_)
      out.emplace_back(prefix.empty() ? n : prefix + "." + n, c);
  }
  return out;
}

// ---------------------------------------------------------------- state_dict

StateDict Module::state_dict() const {
  // PyTorch's order: each module's parameters, then its buffers, then its children. A tensor
  // registered in several places (tied weights: a GPT's token embedding and output head) is
  // saved once, under its first name, as named_parameters() lists it (PyTorch would save it
  // under each).
  StateDict sd;
  std::unordered_set<const TensorImpl*> seen;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m,
                                                                    const std::string& prefix) {
    for (const auto& e : m.params_)
      if (seen.insert(e.t->impl()).second) sd.emplace_back(prefix + e.name, e.t->detach());
    for (const auto& e : m.buffers_)
      if (e.persistent && seen.insert(e.t->impl()).second)
        sd.emplace_back(prefix + e.name, e.t->detach());
    for (const auto& [n, c] : m.children_) walk(*c, prefix + n + ".");
  };
  walk(*this, "");
  return sd;
}

LoadResult Module::load_state_dict(const StateDict& sd, bool strict) {
  StateDict mine = state_dict();
  std::unordered_map<std::string, size_t> given;
  std::vector<std::string> duplicated;
  for (size_t i = 0; i < sd.size(); ++i)
    if (!given.emplace(sd[i].first, i).second) duplicated.push_back(sd[i].first);

  LoadResult r;
  std::vector<std::string> misshaped;
  std::unordered_set<std::string> expected;
  for (const auto& [name, t] : mine) {
    expected.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      r.missing_keys.push_back(name);
      continue;
    }
    const Tensor& src = sd[it->second].second;
    if (!src.defined() || src.shape() != t.shape())
      misshaped.push_back(str(name, " (expected ", t.shape(), ", got ",
                              src.defined() ? str(src.shape()) : std::string("undefined"), ")"));
  }
  for (const auto& [name, t] : sd)
    if (!expected.count(name)) r.unexpected_keys.push_back(name);

  std::ostringstream err;
  if (!duplicated.empty()) err << "\n  duplicated entries: " << join_names(duplicated);
  if (!misshaped.empty()) err << "\n  wrong shape: " << join_names(misshaped);
  if (strict && !r.missing_keys.empty()) err << "\n  missing: " << join_names(r.missing_keys);
  if (strict && !r.unexpected_keys.empty())
    err << "\n  unexpected: " << join_names(r.unexpected_keys);
  LOOM_CHECK(err.str().empty(), type_name_,
             ".load_state_dict: the state dict does not match the module:", err.str());

  NoGradGuard g;
  for (auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it != given.end()) t.copy_(sd[it->second].second);  // t aliases the member's storage
  }
  return r;
}

// ---------------------------------------------------------------- modes and placement

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& [n, p] : named_parameters())
    if (p.grad().defined()) p.set_grad(Tensor());
}

// Converts every parameter and buffer in place: each keeps its TensorImpl and takes f(old)'s data
// (Tensor::set_data), so an optimizer, a hook or any other handle made before to() follows the
// move (Note [Modules hold their tensors by pointer]). A tensor registered in several places
// (tied weights) is converted once.
void Module::convert(const std::function<Tensor(const Tensor&)>& f) {
  NoGradGuard g;
  std::unordered_set<const TensorImpl*> done;
  std::function<void(Module&)> walk = [&](Module& m) {
    for (auto* list : {&m.params_, &m.buffers_}) {
      for (auto& e : *list) {
        Tensor t = *e.t;
        if (!t.defined() || !done.insert(t.impl()).second) continue;
        Tensor moved = f(t);
        if (moved.is_same(t)) continue;
        Tensor grad = t.grad().defined() ? f(t.grad()).detach() : Tensor();
        t.set_data(moved.detach());
        if (grad.defined()) t.set_grad(grad);
      }
    }
    for (auto& [n, c] : m.children_) walk(*c);
  };
  walk(*this);
}

void Module::to(Device d) {
  convert([d](const Tensor& t) { return t.device() == d ? t : loom::to(t, d); });
}

void Module::to(DType dt) {
  LOOM_CHECK(is_floating(dt), type_name_, ".to: dtype ", dtype_name(dt),
             " is not floating (only floating parameters and buffers are converted)");
  convert([dt](const Tensor& t) {
    return !t.is_floating_point() || t.dtype() == dt ? t : loom::to(t, dt);
  });
}

void Module::to(Device d, DType dt) {
  to(d);
  to(dt);
}

// ---------------------------------------------------------------- printing

void Module::print(std::ostream& os, int indent) const {
  os << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [n, c] : children_) {
      os << std::string(size_t(indent + 2), ' ') << "(" << n << "): ";
      c->print(os, indent + 2);
      os << "\n";
    }
    os << std::string(size_t(indent), ' ');
  }
  os << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.print(os);
  return os;
}

}  // namespace loom::nn
