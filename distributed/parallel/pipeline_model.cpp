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

// `whole`'s groups, each kept to the parameters `stage` holds (in the same order).
std::vector<std::vector<Tensor>> stage_groups(const optim::Optimizer& whole,
                                              const PipelineStage& stage) {
  std::unordered_map<const TensorImpl*, bool> mine;
  for (const Tensor& p : stage.parameters()) mine[p.impl()] = true;
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
                             PipelineSchedule schedule, std::shared_ptr<ProcessGroup> tp)
    : model_(std::move(model)),
      whole_opt_(std::move(whole_opt)),
      pp_(std::move(pp)),
      dp_(std::move(dp)),
      tp_(std::move(tp)),
      schedule_(schedule) {
  const int S = pp_->size();
  for (int s = S - 1; s >= 0; --s)  // downwards: a parameter two stages list (tied) ends at 0
    for (const Tensor& p : PipelineStage(*model_, s, S).parameters()) owner_[p.impl()] = s;
  stage_ = std::make_unique<PipelineStage>(*model_, pp_->rank(), S);
  opt_ = whole_opt_->make_like(stage_groups(*whole_opt_, *stage_));
  set_model_share();
}

// Each stage counts its own parameters, the tied head on the first stage only, and under tp the
// split parameters on every tp rank but the whole ones on tp rank 0 only; sums go over pp and tp.
void PipelineModel::set_model_share() {
  const Tensor head = stage_->ties_head() && !stage_->is_first() ? stage_->head_weight() : Tensor();
  std::unordered_set<const TensorImpl*> split;
  if (tp_)
    for (const auto& [impl, share] : tensor_shares(*model_)) split.insert(impl);
  const bool whole_here = !tp_ || tp_->rank() == 0;
  ProcessGroup* pp_group = pp_.get();
  ProcessGroup* tp_group = tp_.get();
  opt_->set_model_share({.counted =
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
  std::string s = "pipeline parallel over " + std::to_string(pp_->size()) + " stages (" +
                  (schedule_ == PipelineSchedule::GPipe ? "GPipe" : "1F1B") + ")";
  if (tp_) s += ", tensor parallel over " + std::to_string(tp_->size()) + " ranks";
  if (dp_->size() > 1) s += ", copies: " + std::to_string(dp_->size()) + " averaged";
  return s;
}

Tensor PipelineModel::forward_backward(const Tensor& x, const Tensor& y, int64_t micro_batches) {
  Tensor loss = pipeline_forward_backward(
      *stage_, x, y, *pp_, {.micro_batches = int(micro_batches), .schedule = schedule_});
  if (dp_->size() > 1) {  // the copies' mean gradient, as DDP's
    autograd::NoGradGuard no_grad;
    for (const Tensor& p : stage_->parameters())
      if (Tensor g = p.grad(); g.defined()) dp_->all_reduce(g, ReduceOp::Avg)->wait();
    dp_->all_reduce(loss, ReduceOp::Avg)->wait();
  }
  return loss;
}

void PipelineModel::refresh_whole_model() {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, p] : model_->named_parameters()) {
    Tensor t = p;  // a handle: broadcast writes the parameter itself
    pp_->broadcast(t, owner_.at(p.impl()))->wait();
  }
}

nn::Module& PipelineModel::eval_module() {
  refresh_whole_model();  // every rank evaluates the whole model as one process does
  return *model_;
}

nn::StateDict PipelineModel::model_state_dict() {
  refresh_whole_model();
  return tp_ ? whole_state_dict(*model_) : model_->state_dict();  // tp: gathered over it
}

void PipelineModel::load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) {
  if (check) check(model_->state_dict());
  // Every rank holds the whole model object (under tp, its share of each split tensor).
  model_->load_state_dict(tp_ ? share_of_state_dict(*model_, whole) : whole);
}

// Note [Whole-layout checkpoints], for a pipeline: the whole optimizer numbers the whole model's
// parameters (whole_opt_, never stepped), each stage's optimizer its own. Saving, every parameter's
// state is broadcast over pp from its stage under the whole number; the groups' hyper-parameters
// are the stage's (the schedule sets its learning rate), their parameter lists the whole's.
nn::StateDict PipelineModel::optimizer_state_dict() {
  const nn::StateDict mine = opt_->state_dict();
  std::map<std::string, Tensor> by_key(mine.begin(), mine.end());
  std::map<std::string, Tensor> kinds;  // each suffix ("exp_avg", "step") with an example
  for (const auto& [key, t] : mine)
    if (auto k = state_key(key)) kinds.emplace(k->second, t);
  const auto local = numbers(*opt_);
  const std::vector<Tensor> params = whole_opt_->all_params();
  nn::StateDict out;
  for (size_t i = 0; i < params.size(); ++i) {
    const int owner = owner_.at(params[i].impl());
    for (const auto& [suffix, example] : kinds) {
      Tensor t;
      if (owner == pp_->rank()) {
        auto it = by_key.find("state." + std::to_string(local.at(params[i].impl())) + "." + suffix);
        LOOM_CHECK(it != by_key.end(), "pipeline checkpoint: stage ", owner, " has no '", suffix,
                   "' state for parameter ", i, " (", loom::describe(params[i]), ")");
        t = contiguous(it->second).clone();
      } else {
        const Shape shape = example.dim() == 0 ? Shape{} : params[i].shape();
        t = empty(shape, {.dtype = example.dtype(), .device = example.device()});
      }
      pp_->broadcast(t, owner)->wait();
      out.emplace_back("state." + std::to_string(i) + "." + suffix, t);
    }
  }
  for (const auto& [key, t] : whole_opt_->state_dict())  // the groups
    if (!state_key(key)) {
      const bool list = key.size() > 7 && key.compare(key.size() - 7, 7, ".params") == 0;
      out.emplace_back(key, list ? t : by_key.at(key));
    }
  return tp_ ? whole_optimizer_state(*model_, *whole_opt_, std::move(out)) : out;
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
  opt_->load_state_dict(mine);
}

void PipelineModel::with_whole_model(const std::function<void()>& f) {
  refresh_whole_model();
  f();
}

void PipelineModel::check_capturable(const char* what) const {
  LOOM_FAIL(what,
            ": a pipeline step sends and receives between stages on the host's schedule, "
            "which a CUDA graph does not capture; leave --pp out or the graph");
}

ParallelModel::Memory PipelineModel::memory() const {
  Memory m;
  for (const Tensor& p : stage_->parameters()) {
    m.parameters += int64_t(p.numel() * p.element_size());
    if (p.grad().defined()) m.gradients += int64_t(p.grad().numel() * p.grad().element_size());
  }
  for (size_t i = 0; i < opt_->all_params().size(); ++i)
    for (const Tensor& b : opt_->state(i).buffers)
      m.optimizer_state += int64_t(b.numel() * b.element_size());
  return m;
}

}  // namespace loom::distributed
