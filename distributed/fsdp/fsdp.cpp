// FullyShardedDataParallel: finding the units, flattening and sharding their parameters, the
// forward hooks that gather and release them, and the FullParams guard. See Note [FSDP] in
// distributed/fsdp/fsdp.h; the backward half is fsdp_backward.cpp.
#include "distributed/fsdp/fsdp.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "distributed/ddp/ddp.h"
#include "distributed/world.h"

namespace loom::distributed {

namespace {
// Elements [offset, offset + n) of a contiguous tensor t, as a 1-D view.
Tensor flat_range(const Tensor& t, int64_t offset, int64_t n) {
  return make_view(t, {n}, {1}, t.offset() + offset);
}

using ModuleList = std::vector<std::pair<std::string, nn::Module*>>;

// The outermost descendants of m whose type is in `types` (units), and every other module
// (the root's own).
void walk(nn::Module& m, const std::string& prefix, const std::vector<std::string>& types,
          ModuleList& units, ModuleList& others) {
  for (const auto& [name, child] : m.named_children()) {
    if (!child) continue;
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (std::find(types.begin(), types.end(), child->type_name()) != types.end())
      units.emplace_back(full, child.get());
    else
      others.emplace_back(full, child.get()), walk(*child, full, types, units, others);
  }
}
}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> pg,
                                                   FSDPOptions options)
    : nn::Module("FullyShardedDataParallel"),
      module_(std::move(module)),
      pg_(pg ? std::move(pg) : world()),
      prefetch_(options.prefetch),
      param_dtype_(options.param_dtype),
      before_reduce_(options.before_reduce) {
  LOOM_CHECK(module_ != nullptr, "FullyShardedDataParallel: the module is null");
  LOOM_CHECK(!param_dtype_ || *param_dtype_ == kBF16 || *param_dtype_ == kF16,
             "FullyShardedDataParallel: param_dtype ", dtype_name(*param_dtype_),
             " (mixed precision gathers in bf16 or fp16)");
  share_members_of(*module_);
  find_units(options);
  install_hooks();
  sync_buffers();
}

void FullyShardedDataParallel::sync_buffers() { broadcast_buffers(*module_, *pg_); }

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (Unit& u : units_)
    if (u.module) u.module->clear_forward_hooks();
  *alive_ = false;  // the gradient hooks on the parameters outlive this object
}

// Every parameter goes to the one unit whose subtree holds it; a parameter the root's own
// modules use too (a tied embedding), or that two units share, stays in the root.
void FullyShardedDataParallel::find_units(const FSDPOptions& options) {
  ModuleList candidates, others{{"", module_.get()}};
  walk(*module_, "", options.unit_types, candidates, others);
  std::unordered_map<const TensorImpl*, int> owners;  // -1: the root's
  for (const auto& [name, m] : others)
    for (const Tensor& p : m->parameters(/*recurse=*/false)) owners[p.impl()] = -1;
  for (size_t c = 0; c < candidates.size(); ++c)
    for (const Tensor& p : candidates[c].second->parameters()) {
      auto [it, inserted] = owners.try_emplace(p.impl(), int(c));
      if (!inserted && it->second != int(c)) it->second = -1;
    }
  std::vector<std::vector<size_t>> ids(candidates.size() + 1);
  for (const auto& [name, p] : module_->named_parameters()) {
    const int c = owners.count(p.impl()) ? owners[p.impl()] : -1;
    ids[size_t(c + 1)].push_back(params_.size());
    params_.push_back(p);
  }
  units_.push_back(Unit{});  // the root, even when it holds nothing
  std::vector<std::vector<size_t>> kept{ids[0]};
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (ids[c + 1].empty()) continue;  // all of its parameters went to the root
    units_.push_back(Unit{});
    units_.back().name = candidates[c].first;
    units_.back().module = candidates[c].second;
    kept.push_back(ids[c + 1]);
  }
  unit_of_.assign(params_.size(), 0);
  layout_.resize(units_.size());
  check_same_units(kept);
  for (size_t u = 0; u < units_.size(); ++u) build_unit(u, kept[u]);
}

// Every rank must cut the same units: their element counts, maxed and minned over the ranks,
// agree (two all-reduces, once).
void FullyShardedDataParallel::check_same_units(const std::vector<std::vector<size_t>>& ids) const {
  std::vector<int64_t> n(2 * ids.size(), 0);
  for (size_t u = 0; u < ids.size(); ++u)
    for (size_t i : ids[u]) n[u] += params_[i].numel();
  for (size_t u = 0; u < ids.size(); ++u) n[ids.size() + u] = -n[u];
  const Device dev = params_.empty() ? Device(kCPU) : params_[0].device();
  Tensor t = from_vector(n, {int64_t(n.size())}).to(dev);
  if (pg_->size() > 1) pg_->all_reduce(t, ReduceOp::Max)->wait();
  const std::vector<int64_t> m = t.to(kCPU).to_vector<int64_t>();
  for (size_t u = 0; u < ids.size(); ++u)
    LOOM_CHECK(m[u] == -m[ids.size() + u], "FullyShardedDataParallel: unit ", u, " ('",
               units_[u].name, "') has ", n[u], " elements on rank ", pg_->rank(), " but between ",
               -m[ids.size() + u], " and ", m[u],
               " on the ranks: every rank must wrap the same model");
}

// Unit u's flat buffer (rank 0's values), this rank's master shard, and the parameters as views.
void FullyShardedDataParallel::build_unit(size_t u, const std::vector<size_t>& ids) {
  Unit& un = units_[u];
  Bucket& b = layout_[u];
  const int64_t N = pg_->size();
  int64_t total = 0;
  for (size_t i : ids) {
    const Tensor& p = params_[i];
    const Tensor& p0 = params_[ids[0]];
    LOOM_CHECK(p.dtype() == p0.dtype() && p.device() == p0.device(),
               "FullyShardedDataParallel: unit '", un.name, "' mixes \"", p0.name(), "\" (",
               describe(p0), ") and \"", p.name(), "\" (", describe(p),
               "): a unit's parameters share one dtype and device");
    unit_of_[i] = u;
    b.params.push_back(i);
    b.offsets.push_back(total);
    total += p.numel();
  }
  const Options opt{.dtype = ids.empty() ? kF32 : params_[ids[0]].dtype(),
                    .device = ids.empty() ? Device(kCPU) : params_[ids[0]].device()};
  b.numel = (total + N - 1) / N * N;
  const int64_t S = b.numel / N;
  Tensor whole = zeros({b.numel}, opt);  // the parameters end to end, padded
  autograd::NoGradGuard no_grad;
  for (size_t k = 0; k < ids.size(); ++k) {
    const Tensor& p = params_[ids[k]];
    make_view(whole, p.shape(), contiguous_strides(p.shape()), b.offsets[k]).copy_(p);
  }
  if (N > 1 && b.numel > 0) pg_->broadcast(whole, 0)->wait();  // rank 0's weights everywhere
  un.value = flat_range(whole, pg_->rank() * S, S).clone();
  b.shard = zeros({S}, opt);
  // The gathered buffer: `whole` itself, or a new one in the compute dtype (mixed precision).
  un.flat = param_dtype_ ? empty({b.numel}, {.dtype = *param_dtype_, .device = opt.device}) : whole;
  un.full = un.flat.storage();
  point_params(u, un.flat);
  std::string names;
  for (size_t k = 0; k < ids.size() && k < 3; ++k)
    names += (k ? ", " : "") + params_[ids[k]].name();
  un.full->released_by = str("FSDP unit '", un.name, "'", un.name.empty() ? " (the root: " : " (",
                             names, ids.size() > 3 ? ", ...)" : ")");
  release(u);
}

// Each parameter of unit u becomes a view of `flat` (its TensorImpl stays: the module's member, the
// program's optimizer and autograd's saved tensors follow).
void FullyShardedDataParallel::point_params(size_t u, const Tensor& flat) {
  const Bucket& b = layout_[u];
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    p.set_data(make_view(flat, p.shape(), contiguous_strides(p.shape()), b.offsets[k]));
  }
}

void FullyShardedDataParallel::install_hooks() {
  for (size_t u = 1; u < units_.size(); ++u)
    units_[u].module->set_forward_hooks(
        {[this, u](nn::Module&) { before_unit(u); },
         [this, u](nn::Module&, std::vector<Tensor>& out) { after_unit(u, out); }});
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].requires_grad())
      autograd::register_post_accumulate_grad_hook(
          params_[i], [this, alive = alive_, u = unit_of_[i]](const Tensor&) {
            if (*alive) on_grad(u);
          });
}

std::vector<std::string> FullyShardedDataParallel::unit_names() const {
  std::vector<std::string> out;
  for (const Unit& u : units_) out.push_back(u.name);
  return out;
}

// ---------------------------------------------------------------- gathering and releasing

// The all-gather writes the values the parameters had when autograd saved them (the optimizer
// writes only the shards), so the storage keeps its version: a tensor saved in the forward and
// read in the backward, with a gather in between, is not "modified in place".
void FullyShardedDataParallel::gather(size_t u, bool wait) {
  if (pinned_) return;  // a FullParams guard holds everything whole
  Unit& un = units_[u];
  if (un.state == State::Released) {
    un.full->reallocate();
    un.version = un.full->version;
    if (param_dtype_) {  // Note [FSDP mixed precision]: the shard rounded, half the bytes sent
      autograd::NoGradGuard no_grad;
      un.sent = un.value.to(*param_dtype_);
    }
    un.gather = pg_->all_gather(un.flat, param_dtype_ ? un.sent : un.value);
    un.state = State::Gathering;
  }
  if (wait && un.state == State::Gathering) {
    un.gather->wait();
    un.gather.reset();
    un.sent = Tensor();
    un.full->version = un.version;
    un.state = State::Gathered;
  }
}

void FullyShardedDataParallel::release(size_t u) {
  if (pinned_) return;  // a FullParams guard keeps everything whole
  Unit& un = units_[u];
  if (un.state == State::Gathering) gather(u);  // never free memory a collective writes
  un.full->release();
  un.state = State::Released;
}

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  return run_root(x, [this](const Tensor& in) { return (*module_)(in); });
}

Tensor FullyShardedDataParallel::loss(const Tensor& x, const Tensor& y) {
  return run_root(x, [&](const Tensor& in) { return module_->loss(in, y); });
}

Tensor FullyShardedDataParallel::run_root(const Tensor& x,
                                          const std::function<Tensor(const Tensor&)>& fn) {
  order_.clear();
  gather(0);
  const bool grad = autograd::is_grad_enabled();
  root_in_backward_ = grad;
  const bool cast = param_dtype_ && !pinned_ && is_floating(x.dtype());  // mixed precision
  Tensor out = fn(cast ? x.to(*param_dtype_) : x);
  if (!grad) release(0);  // no backward follows
  last_order_ = order_;
  return out;
}

void FullyShardedDataParallel::before_unit(size_t u) {
  const bool recompute = autograd::in_backward();  // activation checkpointing
  if (!recompute) order_.push_back(u);
  gather(u);
  const size_t at = order_.size();
  if (prefetch_ && !recompute && at < last_order_.size() && last_order_[at - 1] == u)
    gather(last_order_[at], /*wait=*/false);
}

// The outputs become identities whose backward gathers the unit again (pre_backward); a unit run
// by a checkpoint's recomputation is kept, since its backward runs next.
void FullyShardedDataParallel::after_unit(size_t u, std::vector<Tensor>& outputs) {
  if (autograd::is_grad_enabled())
    for (Tensor& t : outputs)
      if (t.defined() && t.requires_grad())
        t = autograd::record("fsdp_pre_backward", t.detach(), {t},
                             [this, alive = alive_, u](const Tensor& g) {
                               if (*alive) pre_backward(u);
                               return autograd::Grads{g};
                             });
  if (!autograd::in_backward()) release(u);
}

// ---------------------------------------------------------------- FullParams

FullyShardedDataParallel::FullParams::FullParams(FullyShardedDataParallel& f, bool writeback)
    : f_(f), writeback_(writeback) {
  LOOM_CHECK(!f_.pinned_, "FullyShardedDataParallel::full_params: a guard is already alive");
  for (size_t u = 0; u < f_.units_.size(); ++u) {
    if (!f_.param_dtype_) {
      f_.gather(u);
      continue;
    }
    Unit& un = f_.units_[u];  // mixed precision: the master's dtype, in a buffer of its own
    un.master =
        empty({f_.layout_[u].numel}, {.dtype = un.value.dtype(), .device = un.value.device()});
    f_.pg_->all_gather(un.master, un.value)->wait();
    f_.point_params(u, un.master);
  }
  f_.pinned_ = true;
}

FullyShardedDataParallel::FullParams::~FullParams() {
  autograd::NoGradGuard no_grad;
  f_.pinned_ = false;
  const int64_t r = f_.pg_->rank();
  for (size_t u = 0; u < f_.units_.size(); ++u) {
    Unit& un = f_.units_[u];
    const Tensor& whole = f_.param_dtype_ ? un.master : un.flat;
    if (writeback_) un.value.copy_(flat_range(whole, r * un.value.numel(), un.value.numel()));
    if (f_.param_dtype_) f_.point_params(u, un.flat), un.master = Tensor();
    f_.release(u);
  }
}

// ---------------------------------------------------------------- memory

int64_t FullyShardedDataParallel::parameter_bytes() const {
  int64_t n = 0;
  for (const Unit& u : units_) {
    n += int64_t(u.value.numel() * u.value.element_size());
    if (u.state != State::Released) n += int64_t(u.flat.numel() * u.flat.element_size());
  }
  return n;
}

int64_t FullyShardedDataParallel::gradient_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : layout_) n += int64_t(b.shard.numel() * b.shard.element_size());
  for (const Reduction& r : reductions_)
    n += int64_t(r.flat.numel() * r.flat.element_size() +
                 r.incoming.numel() * r.incoming.element_size());
  for (const Tensor& p : params_)
    if (p.grad().defined()) n += int64_t(p.grad().numel() * p.grad().element_size());
  return n;
}

}  // namespace loom::distributed
