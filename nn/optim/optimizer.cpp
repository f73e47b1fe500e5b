// Optimizer: parameter groups, per-parameter state, and the state_dict layout of
// Note [Optimizer state layout], with a load that checks everything before changing anything.
// Leaves out: the update rules (sgd.cpp, adam.cpp).
#include "nn/optim/optimizer.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "core/scoped_value.h"
#include "nn/clip.h"

namespace loom::optim {

// ---------------------------------------------------------------- groups and access

void Optimizer::add_group_params(std::vector<Tensor> params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    LOOM_CHECK(p.defined(), name_, ": parameter ", i, " of group ", groups_.size(),
               " is undefined");
    LOOM_CHECK(p.is_leaf() && p.is_floating_point(), name_,
               ": can only optimize floating leaf tensors, got \"", p.name(), "\" ", describe(p));
    for (const auto& g : groups_)
      for (const auto& q : g)
        LOOM_CHECK(!q.is_same(p), name_, ": parameter \"", p.name(),
                   "\" appears in more than one group");
    for (size_t j = 0; j < i; ++j)
      LOOM_CHECK(!params[j].is_same(p), name_, ": parameter \"", p.name(),
                 "\" appears twice in one group");
  }
  state_.resize(state_.size() + params.size());
  groups_.push_back(std::move(params));
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  LOOM_CHECK(group < groups_.size(), name_, ": no parameter group ", group, " (there are ",
             groups_.size(), ")");
  return groups_[group];
}

std::vector<Tensor> Optimizer::all_params() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.begin(), g.end());
  return out;
}

size_t Optimizer::first_index(size_t group) const {
  size_t n = 0;
  for (size_t g = 0; g < group; ++g) n += groups_[g].size();
  return n;
}

const Tensor& Optimizer::param(size_t param_index) const {
  size_t g = 0;
  while (g < groups_.size() && param_index >= groups_[g].size()) param_index -= groups_[g++].size();
  LOOM_CHECK(g < groups_.size(), name_, ": no parameter with that number");
  return groups_[g][param_index];
}

std::vector<Optimizer::StepBucket> Optimizer::buckets_with_grad(
    size_t group, const std::function<int64_t(size_t)>& key) const {
  std::vector<StepBucket> out;
  std::vector<std::tuple<Device, DType, int64_t>> keys;
  size_t first = first_index(group);
  for (size_t k = 0; k < groups_[group].size(); ++k) {
    const Tensor& p = groups_[group][k];
    if (only_ && p.impl() != only_) continue;  // step_one: another parameter
    Tensor g = p.grad();
    if (!g.defined()) continue;
    LOOM_CHECK(g.shape() == p.shape() && g.dtype() == p.dtype() && g.device() == p.device(), name_,
               ".step: the gradient of \"", p.name(), "\" is ", describe(g),
               " but the parameter is ", describe(p));
    // A model moved (Module::to) after this optimizer's first update: the parameters followed,
    // their state did not.
    for (const Tensor& buf : state_[first + k].buffers)
      LOOM_CHECK(!buf.defined() || (buf.device() == p.device() && buf.dtype() == p.dtype()), name_,
                 ".step: the state of \"", p.name(), "\" is ", describe(buf),
                 " but the parameter is now ", describe(p),
                 " (the model was moved with to() after the optimizer's first step: move it "
                 "before, or save the optimizer's state_dict and load it into a new optimizer)");
    auto kk = std::make_tuple(p.device(), p.dtype(), key(first + k));
    size_t b = 0;
    while (b < keys.size() &&
           !(std::get<0>(keys[b]) == std::get<0>(kk) && std::get<1>(keys[b]) == std::get<1>(kk) &&
             std::get<2>(keys[b]) == std::get<2>(kk)))
      ++b;
    if (b == keys.size()) {
      keys.push_back(kk);
      out.push_back({{}, p.dtype() == kF32 || p.dtype() == kF64});
    }
    out[b].index.push_back(first + k);
    if (!p.is_contiguous()) out[b].fusable = false;
  }
  return out;
}

const ParamState& Optimizer::state(size_t param_index) const {
  LOOM_CHECK(param_index < state_.size(), name_, ": no parameter number ", param_index,
             " (there are ", state_.size(), ")");
  pull_device_steps();
  return state_[param_index];
}

void Optimizer::step_one(const Tensor& p) {
  LOOM_CHECK(!capturable(), name_,
             ".step_one: a capturable optimizer (CUDA graph step) counts one "
             "step per group and step(); it cannot update one parameter at a time");
  bool mine = false;
  for (const auto& g : groups_)
    for (const auto& q : g) mine = mine || q.is_same(p);
  LOOM_CHECK(mine, name_, ".step_one: ", describe(p), " (\"", p.name(),
             "\") is not one of its parameters");
  LOOM_CHECK(p.grad().defined(), name_, ".step_one: parameter \"", p.name(), "\" has no gradient");
  ScopedValue<const TensorImpl*> only(only_, p.impl());
  step();
}

void Optimizer::zero_grad() {
  grad_scale_ = Tensor();  // a clip coefficient no step() used (Note [Clipping inside the update])
  for (auto& g : groups_)
    for (auto& p : g)
      if (p.grad().defined()) p.set_grad(Tensor());
}

std::unique_ptr<Optimizer> Optimizer::make_like(std::vector<std::vector<Tensor>> groups) const {
  (void)groups;
  LOOM_FAIL(name_,
            ".make_like: this optimizer cannot be rebuilt over other parameters (a sharded "
            "optimizer needs it; SGD, Adam and AdamW can)");
}

void Optimizer::sum_over_shards(Tensor& t) const {
  if (share_.sum) share_.sum(t);
}

Tensor Optimizer::clip_grad_norm_(double max_norm) {
  if (!share_.sum) return nn::clip_grad_norm_(all_params(), max_norm);
  auto c = split_clip(max_norm);
  if (!c) return scalar_tensor(0.0);
  NoGradGuard no_grad;
  for (const Tensor& p : all_params())
    if (p.grad().defined()) p.grad().mul_(c->coef.to(p.grad().dtype()));
  return c->total;
}

// Note [Optimizing a share of a model]: the coefficient over every rank's share (none without a
// gradient anywhere on this rank).
std::optional<nn::ClipCoefficient> Optimizer::split_clip(double max_norm) const {
  std::vector<Tensor> counted;
  Tensor g;  // any gradient: the norm's dtype and device
  for (const Tensor& p : all_params()) {
    if (!p.grad().defined()) continue;
    if (!g.defined()) g = p.grad();
    if (share_.counted(p)) counted.push_back(p);
  }
  if (!g.defined()) return std::nullopt;
  return nn::split_clip_coefficient(counted, max_norm, g.dtype(), g.device(), share_.sum);
}

Tensor Optimizer::clip_grad_norm_in_step(double max_norm) {
  if (share_.sum && applies_grad_scale())
    if (auto c = split_clip(max_norm)) {
      grad_scale_ = c->coef;
      return c->total;
    }
  if (applies_grad_scale() && !sharded())
    if (auto c = nn::clip_coefficient(all_params(), max_norm)) {
      grad_scale_ = c->coef;
      return c->total;
    }
  return clip_grad_norm_(max_norm);
}

Tensor Optimizer::take_grad_scale() { return std::exchange(grad_scale_, Tensor()); }

double Optimizer::lr(size_t group) const {
  params(group);  // checks the group number
  for (const auto& [n, v] : hyper_parameters(group))
    if (n == "lr") return v;
  LOOM_FAIL(name_, ": has no learning rate");
}

void Optimizer::set_lr(size_t group, double lr) {
  params(group);
  LOOM_CHECK(lr >= 0.0, name_, ": learning rate ", lr, " is negative");
  set_hyper_parameter(group, "lr", lr);
  if (capturable()) {
    NoGradGuard guard;
    device_lr_[group].fill_(lr);
  }
}

// ---------------------------------------------------------------- capturable steps

void Optimizer::make_capturable() {
  if (capturable()) return;
  NoGradGuard guard;
  std::vector<Tensor> lrs, steps;
  for (size_t g = 0; g < groups_.size(); ++g) {
    LOOM_CHECK(fused(g), name_, ".make_capturable: group ", g,
               " uses the composite update (fused = false); a captured step needs the fused one");
    LOOM_CHECK(!groups_[g].empty(), name_, ".make_capturable: group ", g, " has no parameters");
    const size_t first = first_index(g);
    const Tensor& p0 = groups_[g][0];
    const size_t nbuf = buffer_names(g).size();
    int64_t step = -1;
    bool any_new = false, any_old = false;
    for (size_t k = 0; k < groups_[g].size(); ++k) {
      const Tensor& p = groups_[g][k];
      LOOM_CHECK((p.dtype() == kF32 || p.dtype() == kF64) && p.is_contiguous(), name_,
                 ".make_capturable: parameter \"", p.name(), "\" is ", describe(p),
                 "; the fused update needs contiguous float32 or float64 parameters");
      LOOM_CHECK(p.device() == p0.device(), name_, ".make_capturable: group ", g,
                 " has parameters on ", p0.device(), " and on ", p.device(), " (\"", p.name(),
                 "\")");
      ParamState& st = state_[first + k];
      LOOM_CHECK(step < 0 || st.step == step, name_, ".make_capturable: the parameters of group ",
                 g, " are at different step counts (", step, " and ", st.step, " for \"", p.name(),
                 "\"); a captured step counts once per group");
      step = st.step;
      if (st.buffers.empty() && nbuf > 0) {
        any_new = true;
        for (size_t b = 0; b < nbuf; ++b) st.buffers.push_back(zeros_like(p));
      } else {
        any_old = true;
      }
    }
    // An optimizer that does not count steps (SGD) starts its device count at 0 for new state
    // (the first-step rule) and 1 for state it already had.
    if (!counts_steps()) {
      LOOM_CHECK(!(any_new && any_old), name_, ".make_capturable: group ", g,
                 " has parameters with and without momentum buffers; step once more eagerly "
                 "(or load a full state_dict) first");
      step = any_new || nbuf == 0 ? 0 : 1;
    }
    lrs.push_back(full({1}, lr(g), {.dtype = kF64, .device = p0.device()}));
    steps.push_back(full({1}, double(step), {.dtype = kF64, .device = p0.device()}));
  }
  device_lr_ = std::move(lrs);
  device_step_ = std::move(steps);
}

void Optimizer::step_unless(const Tensor& flag) {
  LOOM_CHECK(capturable(), name_, ".step_unless: call make_capturable() first");
  LOOM_CHECK(flag.defined() && flag.dtype() == kF32 && flag.numel() == 1, name_,
             ".step_unless: the flag must be one float32 value, got ",
             flag.defined() ? describe(flag) : std::string("undefined"));
  skip_if_ = flag;
  try {
    step();
  } catch (...) {
    skip_if_ = Tensor();
    throw;
  }
  skip_if_ = Tensor();
}

DeviceStepScalars Optimizer::device_scalars(size_t group) const {
  if (!capturable()) return {};
  return {device_lr_[group], device_step_[group], skip_if_};
}

void Optimizer::pull_device_steps() const {
  if (!capturable()) return;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t step = int64_t(device_step_[g].item());
    const size_t first = first_index(g);
    for (size_t k = 0; k < groups_[g].size(); ++k)
      if (counts_steps()) state_[first + k].step = step;
  }
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

// ---------------------------------------------------------------- state_dict

StateDict Optimizer::state_dict() const {
  pull_device_steps();
  StateDict sd;
  size_t i = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto names = buffer_names(g);
    for (size_t k = 0; k < groups_[g].size(); ++k, ++i) {
      const ParamState& st = state_[i];
      if (!st.initialized()) continue;
      std::string prefix = "state." + std::to_string(i) + ".";
      if (counts_steps()) sd.emplace_back(prefix + "step", nn::scalar_entry(double(st.step)));
      for (size_t b = 0; b < st.buffers.size() && b < names.size(); ++b)
        sd.emplace_back(prefix + names[b], st.buffers[b].detach());
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> idx(groups_[g].size());
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = int64_t(first_index(g) + k);
    sd.emplace_back(prefix + "params", from_vector(idx, {int64_t(idx.size())}));
    for (const auto& [n, v] : hyper_parameters(g)) sd.emplace_back(prefix + n, nn::scalar_entry(v));
  }
  return sd;
}

namespace {
// "state.12.exp_avg" -> {"state", "12", "exp_avg"}; buffer names contain no dots.
std::vector<std::string> split3(const std::string& key) {
  std::vector<std::string> parts;
  size_t a = key.find('.');
  if (a == std::string::npos) return parts;
  size_t b = key.find('.', a + 1);
  if (b == std::string::npos) return parts;
  return {key.substr(0, a), key.substr(a + 1, b - a - 1), key.substr(b + 1)};
}

bool parse_index(const std::string& s, size_t limit, size_t& out) {
  if (s.empty() || s.size() > 9 ||
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  out = size_t(std::stoul(s));
  return out < limit;
}

std::string shape_or_undefined(const Tensor& t) {
  return t.defined() ? str(t.shape()) : std::string("undefined");
}
}  // namespace

// A state dict sorted by global parameter number (name -> tensor) and by group.
struct Optimizer::Loaded {
  std::vector<std::map<std::string, Tensor>> per_param, per_group;
};

size_t Optimizer::group_of(size_t param_index) const {
  size_t g = 0;
  while (g + 1 < groups_.size() && param_index >= groups_[g].size())
    param_index -= groups_[g++].size();
  return g;
}

Optimizer::Loaded Optimizer::sort_entries(const StateDict& sd,
                                          std::vector<std::string>& problems) const {
  const size_t total = state_.size();
  Loaded l{std::vector<std::map<std::string, Tensor>>(total),
           std::vector<std::map<std::string, Tensor>>(groups_.size())};
  for (const auto& [key, t] : sd) {
    auto parts = split3(key);
    size_t n = 0;
    bool ok = false;
    if (parts.size() == 3 && parts[0] == "state" && parse_index(parts[1], total, n)) {
      auto names = buffer_names(group_of(n));
      ok = (counts_steps() && parts[2] == "step") ||
           std::count(names.begin(), names.end(), parts[2]);
      if (ok) ok = l.per_param[n].emplace(parts[2], t).second;
    } else if (parts.size() == 3 && parts[0] == "param_groups" &&
               parse_index(parts[1], groups_.size(), n)) {
      ok = parts[2] == "params";
      for (const auto& [h, v] : hyper_parameters(n)) ok = ok || parts[2] == h;
      if (ok) ok = l.per_group[n].emplace(parts[2], t).second;
    }
    if (!ok) problems.push_back("unexpected (or duplicated) entry \"" + key + "\"");
  }
  return l;
}

// Every group: its parameter list and all hyper-parameters.
void Optimizer::check_groups(const Loaded& l, std::vector<std::string>& problems) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::string prefix = "param_groups." + std::to_string(g) + ".";
    auto it = l.per_group[g].find("params");
    if (it == l.per_group[g].end()) {
      problems.push_back("missing \"" + prefix + "params\"");
    } else {
      std::vector<int64_t> want(groups_[g].size());
      for (size_t k = 0; k < want.size(); ++k) want[k] = int64_t(first_index(g) + k);
      bool same =
          it->second.defined() && it->second.dim() == 1 && it->second.to_vector<int64_t>() == want;
      if (!same)
        problems.push_back(str("\"", prefix, "params\" lists other parameters than group ", g,
                               "'s ", want.size(), " (numbers ", want.empty() ? 0 : want.front(),
                               "..", want.empty() ? -1 : want.back(), ")"));
    }
    for (const auto& [h, v] : hyper_parameters(g)) {
      auto e = l.per_group[g].find(h);
      if (e == l.per_group[g].end())
        problems.push_back("missing \"" + prefix + h + "\"");
      else if (!e->second.defined() || e->second.numel() != 1)
        problems.push_back("\"" + prefix + h + "\" should hold one value, got " +
                           shape_or_undefined(e->second));
    }
  }
}

// Every parameter with state: all of it, of the right shapes.
void Optimizer::check_param_states(const Loaded& l, std::vector<std::string>& problems) const {
  for (size_t i = 0; i < state_.size(); ++i) {
    if (l.per_param[i].empty()) continue;
    const size_t g = group_of(i);
    const Tensor& p = groups_[g][i - first_index(g)];
    std::string prefix = "state." + std::to_string(i) + ".";
    if (counts_steps()) {
      auto e = l.per_param[i].find("step");
      if (e == l.per_param[i].end())
        problems.push_back("missing \"" + prefix + "step\"");
      else if (!e->second.defined() || e->second.numel() != 1)
        problems.push_back("\"" + prefix + "step\" should hold one value, got " +
                           shape_or_undefined(e->second));
    }
    for (const auto& b : buffer_names(g)) {
      auto e = l.per_param[i].find(b);
      if (e == l.per_param[i].end())
        problems.push_back("missing \"" + prefix + b + "\"");
      else if (!e->second.defined() || e->second.shape() != p.shape())
        problems.push_back(str("\"", prefix, b, "\" has shape ", shape_or_undefined(e->second),
                               ", parameter \"", p.name(), "\" has ", p.shape()));
    }
  }
}

// Hyper-parameters, then state (buffers copied onto each parameter's device and dtype).
void Optimizer::apply(const Loaded& l) {
  NoGradGuard guard;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const auto& [h, v] : hyper_parameters(g))
      set_hyper_parameter(g, h, l.per_group[g].at(h).item());
  for (size_t i = 0; i < state_.size(); ++i) {
    ParamState st;
    if (!l.per_param[i].empty()) {
      const size_t g = group_of(i);
      const Tensor& p = groups_[g][i - first_index(g)];
      if (counts_steps()) st.step = int64_t(l.per_param[i].at("step").item());
      for (const auto& b : buffer_names(g)) {
        Tensor buf = zeros_like(p);
        buf.copy_(l.per_param[i].at(b));
        st.buffers.push_back(buf);
      }
    }
    state_[i] = std::move(st);
  }
}

// A capturable optimizer keeps its state complete (Note [Capturable optimizer]); its scalars
// follow the loaded values.
void Optimizer::refresh_capturable() {
  NoGradGuard guard;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const size_t first = first_index(g);
    const bool had_state = !state_[first].buffers.empty();
    for (size_t k = 0; k < groups_[g].size(); ++k) {
      ParamState& st = state_[first + k];
      if (st.buffers.empty())
        for (size_t b = 0; b < buffer_names(g).size(); ++b)
          st.buffers.push_back(zeros_like(groups_[g][k]));
    }
    // As in make_capturable: SGD counts 0 for new momentum buffers, 1 for loaded ones.
    const double step = counts_steps() ? double(state_[first].step) : (had_state ? 1.0 : 0.0);
    device_lr_[g].fill_(lr(g));
    device_step_[g].fill_(step);
  }
}

void Optimizer::load_state_dict(const StateDict& sd) {
  std::vector<std::string> problems;
  Loaded l = sort_entries(sd, problems);
  check_groups(l, problems);
  check_param_states(l, problems);
  if (!problems.empty()) {
    std::string msg;
    for (const auto& s : problems) msg += "\n  " + s;
    LOOM_FAIL(name_, ".load_state_dict: the state dict does not match this optimizer:", msg);
  }
  apply(l);
  if (capturable()) refresh_capturable();
}

}  // namespace loom::optim
