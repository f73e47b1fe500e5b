// ZeroOptimizer: the shard's optimizer over views of this rank's slices, the gradients bound to
// the reduced shards, the all-gather after each step, the sums over ranks and the memory count.
// See Note [ZeRO stages] in distributed/zero/zero_optimizer.h; the state dict is in
// zero_state_dict.cpp.
#include "distributed/zero/zero_optimizer.h"

#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "nn/clip.h"

namespace loom::distributed {

namespace {
constexpr size_t kNone = size_t(-1);

// Elements [offset, offset + n) of a contiguous tensor t, as a 1-D view.
Tensor flat_range(const Tensor& t, int64_t offset, int64_t n) {
  return make_view(t, {n}, {1}, t.offset() + offset);
}

// The gradient shards of ddp's reducer (Note [ZeRO gradient shards] in
// distributed/ddp/sharded_reduce_buckets.h).
ShardedBuckets& shards_of(DistributedDataParallel& ddp) {
  ShardedBuckets* shards = ddp.reducer().shards();
  LOOM_CHECK(shards, "ZeroOptimizer: the model's DistributedDataParallel has no ZeRO stage ",
             "(make it with ddp_options_for_zero(1 or 2))");
  return *shards;
}
}  // namespace

DDPOptions ddp_options_for_zero(int stage) {
  LOOM_CHECK(stage >= 0 && stage <= 2, "ddp_options_for_zero(", stage,
             "): DistributedDataParallel runs stages 0 (DDP), 1 (sharded optimizer state) and 2 "
             "(and sharded gradients); stage 3 (sharded parameters) is FullyShardedDataParallel "
             "(distributed/fsdp/fsdp.h)");
  DDPOptions o;
  o.reducer.zero_stage = stage;
  return o;
}

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, optim::Optimizer& full)
    : ZeroOptimizer(shards_of(ddp), full) {}

ZeroOptimizer::ZeroOptimizer(ShardedBuckets& shards, optim::Optimizer& full)
    : Optimizer("ZeRO-" + std::to_string(shards.zero_stage()) + " " + full.name()),
      reducer_(shards),
      pg_(shards.shard_group()),
      full_(full) {
  LOOM_CHECK(!full.capturable() && !full.sharded(), name(),
             ": the optimizer to shard must be a plain one (not capturable, not sharded)");
  const auto& rp = reducer_.params();
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t j = 0; j < rp.size(); ++j) index[rp[j].impl()] = j;
  full_of_reducer_.assign(rp.size(), kNone);
  for (size_t g = 0; g < full.num_param_groups(); ++g)
    for (const Tensor& p : full.params(g)) {
      auto it = index.find(p.impl());
      LOOM_CHECK(it != index.end(), name(), ": parameter \"", p.name(), "\" ", describe(p),
                 " of the optimizer is not one the model's DistributedDataParallel reduces (not "
                 "in the model, or requires_grad is off)");
      LOOM_CHECK(p.is_contiguous(), name(), ": parameter \"", p.name(), "\" is not contiguous");
      full_of_reducer_[it->second] = reducer_of_full_.size();
      reducer_of_full_.push_back(it->second);
      group_of_full_.push_back(g);
    }

  // This rank's segments (Note [ZeRO partition]) and the shard's optimizer over views of them.
  std::vector<BucketShape> shapes;
  for (const Bucket& b : reducer_.buckets()) {
    shapes.push_back({{}, b.numel});
    for (size_t j : b.params) shapes.back().numels.push_back(rp[j].numel());
  }
  std::vector<std::vector<Tensor>> groups(full.num_param_groups());
  std::vector<std::vector<size_t>> segs_of_group(groups.size());
  for (const Segment& s : zero_segments(shapes, pg_.rank(), pg_.size())) {
    const size_t j = reducer_.buckets()[s.bucket].params[s.slot], i = full_of_reducer_[j];
    if (i == kNone) continue;  // reduced, but not optimized: its values never change
    const Tensor master = reducer_.value_shard(s.bucket);  // stage 3: the values live there
    Tensor v = master.defined() ? flat_range(master, s.shard_offset, s.numel)
                                : flat_range(rp[j], s.param_offset, s.numel);
    v.set_name(str(rp[j].name(), "[", s.param_offset, ":", s.param_offset + s.numel, "]"));
    segs_of_group[group_of_full_[i]].push_back(segs_.size());
    segs_.push_back(s);
    views_.push_back(v);
  }
  inner_of_seg_.assign(segs_.size(), 0);
  for (size_t g = 0, n = 0; g < groups.size(); ++g)
    for (size_t k : segs_of_group[g]) {
      inner_of_seg_[k] = n++;
      groups[g].push_back(views_[k]);
    }
  for (const auto& g : groups) add_group_params(g);  // the same views: all_params() for scalers
  inner_ = full.make_like(std::move(groups));

  // A resumed run's state moves into the shards; the program's optimizer keeps none.
  bool has_state = false;
  for (size_t i = 0; i < reducer_of_full_.size(); ++i) has_state |= full.state(i).initialized();
  if (has_state) load_state_dict(full.state_dict());
  for (auto& st : full.state_) st = optim::ParamState{};
  reducer_.zero_shards();
  reducer_.set_shards_ready_hook([this] { bind_shard_grads(); });
}

// ---------------------------------------------------------------- the step

void ZeroOptimizer::bind_shard_grads() {
  for (size_t k = 0; k < segs_.size(); ++k) {
    const Tensor& shard = reducer_.buckets()[segs_[k].bucket].shard;
    views_[k].set_grad(flat_range(shard, segs_[k].shard_offset, segs_[k].numel));
  }
}

void ZeroOptimizer::zero_grad() {
  Optimizer::zero_grad();
  reducer_.zero_shards();
}

void ZeroOptimizer::step() {
  inner_->step();
  all_gather_params();
}

// Bucket by bucket, so that the whole model is never copied at once.
void ZeroOptimizer::all_gather_params() {
  if (pg_.size() == 1 || stage() == 3) return;  // the model is the shard / FSDP gathers later
  autograd::NoGradGuard no_grad;
  const auto& rp = reducer_.params();
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    const Bucket& bucket = reducer_.buckets()[b];
    Tensor mine = shard_of(b, "");
    Tensor whole = empty({bucket.numel}, {.dtype = mine.dtype(), .device = mine.device()});
    pg_.all_gather(whole, mine)->wait();
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const Tensor& p = rp[bucket.params[k]];
      flat_range(p, 0, p.numel()).copy_(flat_range(whole, bucket.offsets[k], p.numel()));
    }
  }
}

// Over the data-parallel ranks, then (tensor parallel) over the ranks holding the model's other
// shares (Note [Optimizing a share of a model]).
void ZeroOptimizer::sum_over_shards(Tensor& t) const {
  if (pg_.size() > 1) pg_.all_reduce(t, ReduceOp::Sum)->wait();
  Optimizer::sum_over_shards(t);
}

Tensor ZeroOptimizer::clip_grad_norm_(double max_norm) {
  std::vector<Tensor> grads, counted;  // counted: the views whose squares count on this rank
  const ModelShare& share = model_share();
  for (size_t k = 0; k < views_.size(); ++k) {
    if (!views_[k].grad().defined()) continue;
    grads.push_back(views_[k].grad());
    const Bucket& b = reducer_.buckets()[segs_[k].bucket];
    if (!share.counted || share.counted(reducer_.params()[b.params[segs_[k].slot]]))
      counted.push_back(views_[k]);
  }
  // The norm in the shards' dtype (FSDP with bf16 compute parameters: their fp32 master's).
  const Tensor& p0 = views_.empty() ? reducer_.params().at(0) : views_[0];
  auto sum = [this](Tensor& t) { sum_over_shards(t); };
  if (!share.counted)
    return nn::clip_grad_norm_sharded_(grads, max_norm, p0.dtype(), p0.device(), sum);
  nn::ClipCoefficient c =
      nn::split_clip_coefficient(counted, max_norm, p0.dtype(), p0.device(), sum);
  autograd::NoGradGuard no_grad;
  for (Tensor& g : grads) g.mul_(c.coef.to(g.dtype()));
  return c.total;
}

ZeroOptimizer::Memory ZeroOptimizer::memory() const {
  Memory m;
  m.parameters = reducer_.parameter_bytes();
  m.gradients = reducer_.gradient_bytes();
  for (size_t k = 0; k < segs_.size(); ++k)
    for (const Tensor& b : inner_->state(inner_of_seg_[k]).buffers)
      m.optimizer_state += int64_t(b.numel() * b.element_size());
  return m;
}

// ---------------------------------------------------------------- hyper-parameters

std::vector<std::pair<std::string, double>> ZeroOptimizer::hyper_parameters(size_t group) const {
  return inner_->hyper_parameters(group);
}

void ZeroOptimizer::set_hyper_parameter(size_t group, const std::string& name, double value) {
  inner_->set_hyper_parameter(group, name, value);
  full_.set_hyper_parameter(group, name, value);  // so that full.lr() tells the truth
}

std::vector<std::string> ZeroOptimizer::buffer_names(size_t group) const {
  return inner_->buffer_names(group);
}

bool ZeroOptimizer::counts_steps() const { return inner_->counts_steps(); }
bool ZeroOptimizer::fused(size_t group) const { return inner_->fused(group); }

std::string ZeroOptimizer::describe_param(size_t i) const {
  return str("parameter ", i, " (\"", reducer_.params()[reducer_of_full_[i]].name(), "\")");
}

}  // namespace loom::distributed
