// PipelineModel: see distributed/parallel/pipeline_model.h.
#include "distributed/parallel/pipeline_model.h"

#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/error.h"
#include "distributed/tensor_parallel/tensor_parallel.h"
#include "distributed/tensor_parallel/tp_checkpoint.h"

namespace loom::distributed {

namespace {

// "state.<i>.<suffix>" -> {i, suffix}; nullopt for other keys (param_groups.*).
std::optional<std::pair<size_t, std::string>> state_key(const std::string& key) {
  if (key.rfind("state.", 0) != 0) return std::nullopt;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return std::nullopt;
  for (size_t c = 6; c < dot; ++c)
    if (key[c] < '0' || key[c] > '9') return std::nullopt;
  return std::make_pair(size_t(std::stoul(key.substr(6, dot - 6))), key.substr(dot + 1));
}

// The optimizer's parameters, numbered as its state_dict numbers them.
std::unordered_map<const TensorImpl*, size_t> numbers(const optim::Optimizer& opt) {
  std::unordered_map<const TensorImpl*, size_t> out;
  const std::vector<Tensor> params = opt.all_params();
  for (size_t i = 0; i < params.size(); ++i) out[params[i].impl()] = i;
  return out;
}

// `whole`'s groups, each kept to the parameters the rank's chunks hold (in the same order).
std::vector<std::vector<Tensor>> stage_groups(const optim::Optimizer& whole,
                                              const std::vector<PipelineStage*>& chunks) {
  std::unordered_map<const TensorImpl*, bool> mine;
  for (const PipelineStage* st : chunks)
    for (const Tensor& p : st->parameters()) mine[p.impl()] = true;
  std::vector<std::vector<Tensor>> groups(whole.num_param_groups());
  for (size_t g = 0; g < whole.num_param_groups(); ++g)
    for (const Tensor& p : whole.params(g))
      if (mine.count(p.impl())) groups[g].push_back(p);
  return groups;
}

}  // namespace

PipelineModel::PipelineModel(std::shared_ptr<nn::Module> model,
                             std::unique_ptr<optim::Optimizer> whole_opt,
                             std::shared_ptr<ProcessGroup> pp, std::shared_ptr<ProcessGroup> dp,
                             PipelineSchedule schedule, std::shared_ptr<ProcessGroup> tp, int zero,
                             int virtual_stages, std::shared_ptr<ProcessGroup> pp_gradients)
    : model_(std::move(model)),
      whole_opt_(std::move(whole_opt)),
      pp_(std::move(pp)),
      dp_(std::move(dp)),
      tp_(std::move(tp)),
      pp_gradients_(std::move(pp_gradients)),
      schedule_(schedule) {
  const int S = pp_->size();
  stages_ = rank_chunks(*model_, pp_->rank(), S, virtual_stages);  // checks the cut first
  for (const auto& st : stages_) chunks_.push_back(st.get());
  const int C = S * virtual_stages;  // chunk c on rank c mod S (Note [Interleaved 1F1B])
  for (int c = C - 1; c >= 0; --c)   // downwards: a parameter two chunks hold (tied) ends at 0
    for (const Tensor& p : PipelineStage(*model_, c, C).held()) owner_[p.impl()] = c % S;
  if (tp_) shares_ = tensor_shares(*model_);
  opt_ = whole_opt_->make_like(stage_groups(*whole_opt_, chunks_));
  if (zero == 3) {  // Note [FSDP over a pipeline stage] in distributed/fsdp/fsdp.h
    LOOM_CHECK(chunks_.size() == 1, "PipelineModel: FSDP (zero 3) over ", chunks_.size(),
               " chunks per rank (the interleaved schedule; one stage per rank only)");
    // tp: each tp rank shards its own shares (Note [FSDP over a tensor-parallel pipeline stage])
    fsdp_ = shard_stage(*model_, *chunks_.front(), dp_, tp_);
    zero_ = std::make_unique<ZeroOptimizer>(*fsdp_, *opt_);
  } else if (zero > 0) {  // Note [ZeRO over a pipeline stage]
    shards_ = std::make_unique<StageShards>(opt_->all_params(), dp_, zero);
    zero_ = std::make_unique<ZeroOptimizer>(*shards_, *opt_);
  }
  set_model_share();
  release_other_stages();
}

// Note [A pipeline rank holds its stage]
void PipelineModel::release_other_stages() {
  std::unordered_set<const Storage*> kept;
  std::string blocks;
  for (const PipelineStage* st : chunks_) {
    for (const Tensor& p : st->held()) kept.insert(p.storage().get());
    blocks += (blocks.empty() ? "[" : " and [") + std::to_string(st->first_block()) + ", " +
              std::to_string(st->end_block()) + ")";
  }
  const std::string who = "pipeline stage " + std::to_string(pp_->rank()) + " of " +
                          std::to_string(pp_->size()) + " (blocks " + blocks +
                          "): a parameter of another stage, not held on this rank (the whole "
                          "model is its state_dict, gathered: PipelineModel::model_state_dict)";
  for (const Tensor& p : model_->parameters()) {
    Storage& s = *p.storage();
    if (kept.count(&s) || s.released()) continue;
    s.released_by = who;
    s.release();
  }
}

// Each stage counts its own parameters, the tied head on the first stage only, and under tp the
// split parameters on every tp rank but the whole ones on tp rank 0 only; sums go over pp and tp.
void PipelineModel::set_model_share() {
  const PipelineStage& front = *chunks_.front();  // the model's chunk 0 on pp rank 0
  const Tensor head = front.ties_head() && !front.is_first() ? front.head_weight() : Tensor();
  std::unordered_set<const TensorImpl*> split;
  if (tp_)
    for (const auto& [impl, share] : tensor_shares(*model_)) split.insert(impl);
  const bool whole_here = !tp_ || tp_->rank() == 0;
  ProcessGroup* pp_group = pp_.get();
  ProcessGroup* tp_group = tp_.get();
  optimizer().set_model_share({.counted =
                                   [head, split, whole_here](const Tensor& p) {
                                     if (head.defined() && p.is_same(head)) return false;
                                     return whole_here || split.count(p.impl()) > 0;
                                   },
                               .sum =
                                   [pp_group, tp_group](Tensor& t) {
                                     pp_group->all_reduce(t, ReduceOp::Sum)->wait();
                                     if (tp_group) tp_group->all_reduce(t, ReduceOp::Sum)->wait();
                                   }});
}

std::string PipelineModel::describe() const {
  const std::string sched =
      schedule_ == PipelineSchedule::GPipe ? "GPipe"
      : schedule_ == PipelineSchedule::OneFOneB
          ? "1F1B"
          : "interleaved 1F1B, " + std::to_string(chunks_.size()) + " virtual stages each";
  std::string s =
      "pipeline parallel over " + std::to_string(pp_->size()) + " stages (" + sched + ")";
  if (tp_)
    s += std::string(chunks_.front()->sequence_parallel() ? ", tensor and sequence parallel"
                                                          : ", tensor parallel") +
         " over " + std::to_string(tp_->size()) + " ranks";
  if (dp_->size() > 1)
    s += ", copies: " + std::to_string(dp_->size()) +
         (fsdp_   ? std::string(" with FSDP (ZeRO-3)")
          : zero_ ? " with ZeRO-" + std::to_string(zero_->stage())
                  : std::string(" averaged"));
  return s;
}

optim::Optimizer& PipelineModel::optimizer() {
  return zero_ ? static_cast<optim::Optimizer&>(*zero_) : *opt_;
}

Tensor PipelineModel::forward_backward(const Tensor& x, const Tensor& y, int64_t micro_batches,
                                       std::optional<DType> autocast, amp::GradScaler* scaler) {
  if (fsdp_) fsdp_->hold_root();  // Note [FSDP over a pipeline stage]
  Tensor loss = pipeline_forward_backward(chunks_, x, y, *pp_,
                                          {.micro_batches = int(micro_batches),
                                           .schedule = schedule_,
                                           .autocast = autocast,
                                           .scaler = scaler,
                                           .gradients = pp_gradients_.get()});
  if (shards_ || fsdp_) {  // ZeRO: the mean gradient's shards (Note [ZeRO over a pipeline stage])
    if (shards_) shards_->reduce();
    if (fsdp_) fsdp_->release_root(/*reduce=*/true);  // the units reduced in each backward
    if (dp_->size() > 1) dp_->all_reduce(loss, ReduceOp::Avg)->wait();
  } else if (dp_->size() > 1) {  // the copies' mean gradient, as DDP's
    autograd::NoGradGuard no_grad;
    for (const PipelineStage* st : chunks_)  // no parameter in two chunks of one rank (S >= 2)
      for (const Tensor& p : st->parameters())
        if (Tensor g = p.grad(); g.defined()) dp_->all_reduce(g, ReduceOp::Avg)->wait();
    dp_->all_reduce(loss, ReduceOp::Avg)->wait();
  }
  return loss;
}

Tensor PipelineModel::eval_forward(const Tensor& x) {
  if (fsdp_) fsdp_->hold_root();
  Tensor logits = pipeline_forward(chunks_, x, *pp_);
  if (fsdp_) fsdp_->release_root(/*reduce=*/false);
  return tp_ && tp_->rank() != 0 ? Tensor() : logits;  // tp: every rank has the same logits
}

Shape PipelineModel::whole_shape(const Tensor& p) const {
  Shape shape = p.shape();
  if (auto it = shares_.find(p.impl()); it != shares_.end())
    shape[size_t(it->second.dim)] = it->second.whole;
  return shape;
}

Tensor PipelineModel::to_first_stage(const Tensor& mine, int owner, const Tensor& like,
                                     const Shape& shape, int tag) {
  const int here = pp_->rank();
  if (owner == here && here == 0) return mine;
  if (owner == here) {
    Tensor c = contiguous(mine);
    pp_->send(c, 0, tag)->wait();
    return Tensor();
  }
  if (here != 0) return Tensor();
  Tensor t = empty(shape, {.dtype = like.dtype(), .device = like.device()});
  pp_->recv(t, owner, tag)->wait();
  return t;
}

// Note [A pipeline rank holds its stage]: each tensor made whole over tp by its stage and sent to
// the pipeline's first rank, in the whole state_dict's order (its index the message's tag).
nn::StateDict PipelineModel::model_state_dict() {
  autograd::NoGradGuard no_grad;
  auto gathered = fsdp_ ? fsdp_->full_params() : nullptr;  // FSDP: the stage whole over dp
  std::unordered_map<std::string, Tensor> params;
  for (const auto& [name, p] : model_->named_parameters()) params.emplace(name, p);
  const int here = pp_->rank();
  nn::StateDict out;
  int tag = 0;
  for (const auto& [name, t] : model_->state_dict()) {
    auto it = params.find(name);
    if (it == params.end()) {  // a buffer: every stage holds it
      if (here == 0) out.emplace_back(name, t);
      continue;
    }
    const Tensor& p = it->second;
    auto owner = owner_.find(p.impl());
    LOOM_CHECK(owner != owner_.end(), "pipeline checkpoint: no stage holds '", name, "'");
    Tensor mine;
    if (owner->second == here) {
      auto share = shares_.find(p.impl());
      mine = share == shares_.end() ? t : gather_share(t, share->second);
    }
    Tensor whole = to_first_stage(mine, owner->second, t, whole_shape(p), tag++);
    if (here == 0) out.emplace_back(name, whole);
  }
  return fsdp_ ? host_copy(out) : out;  // FSDP's gathered memory goes with `gathered`
}

void PipelineModel::load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) {
  auto gathered = fsdp_ ? fsdp_->full_params(/*writeback=*/true) : nullptr;  // into the shards
  const nn::StateDict names = model_->state_dict();
  if (check) check(names);
  std::unordered_set<std::string> all, held;  // held: this stage's tensors and the buffers
  for (const auto& [name, t] : names) {
    all.insert(name);
    if (!t.storage()->released()) held.insert(name);
  }
  nn::StateDict mine;
  for (const auto& [name, t] : whole) {
    LOOM_CHECK(all.count(name), "pipeline: the state dict's '", name, "' is not a tensor of ",
               model_->type_name());
    if (held.count(name)) mine.emplace_back(name, t);
  }
  for (const std::string& name : held)
    LOOM_CHECK(nn::find(mine, name) != nullptr, "pipeline: the state dict has no '", name,
               "', which pipeline rank ", pp_->rank(), " of ", pp_->size(), " holds");
  model_->load_state_dict(tp_ ? share_of_state_dict(*model_, mine) : mine, /*strict=*/false);
}

// Note [Whole-layout checkpoints], for a pipeline: the whole optimizer numbers the whole model's
// parameters (whole_opt_, never stepped), each stage's optimizer its own. Saving, every parameter's
// state is broadcast over pp from its stage under the whole number; the groups' hyper-parameters
// are the stage's (the schedule sets its learning rate), their parameter lists the whole's.
nn::StateDict PipelineModel::stage_optimizer_state(const nn::StateDict& local) {
  const std::vector<Tensor> mine = opt_->all_params();
  const auto whole = numbers(*whole_opt_);
  const Device dev =
      chunks_.front()->head_weight().device();  // ZeRO's gathered state is on the host
  nn::StateDict out;
  for (const auto& [key, t] : local)
    if (auto k = state_key(key))
      out.emplace_back(
          "state." + std::to_string(whole.at(mine.at(k->first).impl())) + "." + k->second,
          t.device() == dev ? t : t.to(dev));
  return tp_ ? whole_optimizer_state(*model_, *whole_opt_, std::move(out)) : out;
}

nn::StateDict PipelineModel::optimizer_state_dict() {
  const nn::StateDict local = optimizer().state_dict();  // ZeRO: gathered over dp
  const nn::StateDict stage = stage_optimizer_state(local);
  std::map<std::string, Tensor> by_key(stage.begin(), stage.end());
  std::map<std::string, Tensor> kinds;  // each suffix ("exp_avg", "step") with an example
  for (const auto& [key, t] : stage)
    if (auto k = state_key(key)) kinds.emplace(k->second, t);
  const std::vector<Tensor> params = whole_opt_->all_params();
  const int here = pp_->rank();
  nn::StateDict out;
  int tag = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int owner = owner_.at(params[i].impl());
    for (const auto& [suffix, example] : kinds) {
      const std::string key = "state." + std::to_string(i) + "." + suffix;
      Tensor mine;
      if (owner == here) {
        auto it = by_key.find(key);
        LOOM_CHECK(it != by_key.end(), "pipeline checkpoint: stage ", owner, " has no '", suffix,
                   "' state for parameter ", i, " (", loom::describe(params[i]), ")");
        mine = it->second;
      }
      const Shape shape = example.dim() == 0 ? Shape{} : whole_shape(params[i]);
      Tensor t = to_first_stage(mine, owner, example, shape, tag++);
      if (here == 0) out.emplace_back(key, t);
    }
  }
  if (here != 0) return {};
  std::map<std::string, Tensor> groups(local.begin(), local.end());
  for (const auto& [key, t] : whole_opt_->state_dict())  // the groups
    if (!state_key(key)) {
      const bool list = key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0;
      out.emplace_back(key, list ? t : groups.at(key));
    }
  return out;
}

void PipelineModel::load_optimizer_state_dict(const nn::StateDict& whole_layout) {
  const nn::StateDict whole =  // under tp: this rank's shares, still in the whole numbering
      tp_ ? share_of_optimizer_state(*model_, *whole_opt_, whole_layout) : whole_layout;
  const std::vector<Tensor> params = whole_opt_->all_params();
  const auto local = numbers(*opt_);
  nn::StateDict mine;
  for (const auto& [key, t] : opt_->state_dict())  // this stage's groups' parameter lists
    if (!state_key(key) && key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0)
      mine.emplace_back(key, t);
  for (const auto& [key, t] : whole) {
    if (auto k = state_key(key)) {
      LOOM_CHECK(k->first < params.size(), "pipeline checkpoint: '", key, "' names parameter ",
                 k->first, " of a model with ", params.size());
      auto it = local.find(params[k->first].impl());
      if (it != local.end())
        mine.emplace_back("state." + std::to_string(it->second) + "." + k->second, t);
    } else if (key.size() <= 7 || key.compare(key.size() - 7, 7, ".params") != 0) {
      mine.emplace_back(key, t);  // a hyper-parameter
    }
  }
  optimizer().load_state_dict(mine);  // ZeRO: each dp rank takes its slices
}

void PipelineModel::with_whole_model(const std::function<void()>& f) {
  (void)f;
  LOOM_FAIL("pipeline parallel: rank ", pp_->rank(), " of the ", pp_->size(),
            " stages holds only its stage's parameters and the model is never whole on one; "
            "gather its state_dict (the whole layout) into a plain model to sample or export it");
}

void PipelineModel::check_capturable(const char* what) const {
  LOOM_FAIL(what,
            ": a pipeline step sends and receives between stages on the host's schedule, "
            "which a CUDA graph does not capture; leave --pp out or the graph");
}

// What this rank really holds (Note [A pipeline rank holds its stage]): the parameters whose
// storage is not released, their gradients, the stage optimizer's state.
ParallelModel::Memory PipelineModel::memory() const {
  if (fsdp_) {  // the shards (and the units gathered now), their gradients and state
    const ZeroOptimizer::Memory z = zero_->memory();
    return {
        .parameters = z.parameters, .gradients = z.gradients, .optimizer_state = z.optimizer_state};
  }
  Memory m;
  std::unordered_set<const TensorImpl*> seen;
  for (const Tensor& p : model_->parameters()) {
    if (!seen.insert(p.impl()).second || p.storage()->released()) continue;
    m.parameters += int64_t(p.numel() * p.element_size());
    if (p.grad().defined()) m.gradients += int64_t(p.grad().numel() * p.grad().element_size());
  }
  if (zero_) {  // the shards of the gradients and of the state
    const ZeroOptimizer::Memory z = zero_->memory();
    m.gradients = z.gradients, m.optimizer_state = z.optimizer_state;
    return m;
  }
  for (size_t i = 0; i < opt_->all_params().size(); ++i)
    for (const Tensor& b : opt_->state(i).buffers)
      m.optimizer_state += int64_t(b.numel() * b.element_size());
  return m;
}

}  // namespace loom::distributed
