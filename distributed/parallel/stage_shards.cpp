// StageShards: see distributed/parallel/stage_shards.h (Note [ZeRO over a pipeline stage]).
#include "distributed/parallel/stage_shards.h"

#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/error.h"
#include "distributed/tensor_parallel/sequence_parallel.h"

namespace loom::distributed {

namespace {
constexpr size_t kFirstBucketBytes = size_t(1) << 20, kBucketBytes = size_t(25) << 20;  // DDP's

// The modules of one stage as the children of one module (named by their dotted path, '.' as
// '_'), for FSDP to wrap; never called itself (the stage's schedule calls the children).
class StageModules : public nn::Module {
 public:
  StageModules() : nn::Module("PipelineStageModules") {}
  void add(const std::string& path, std::shared_ptr<nn::Module> m) {
    std::string name = path;
    for (char& c : name)
      if (c == '.') c = '_';
    add_child(name, std::move(m));
  }
  Tensor forward(const Tensor& x) override {
    (void)x;
    LOOM_FAIL("PipelineStageModules: a pipeline stage's schedule calls its modules itself");
  }
};

// The outermost modules under `m` whose parameters the stage all holds (a module holding some
// but not all: its children are looked at; its own parameters must then be none of the stage's).
void collect_held(const nn::Module& m, const std::string& prefix,
                  const std::unordered_set<const TensorImpl*>& held, StageModules& out) {
  for (const auto& [name, child] : m.named_children()) {
    if (!child) continue;
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    size_t mine = 0, all = 0;
    for (const Tensor& p : child->parameters()) ++all, mine += held.count(p.impl());
    if (mine == 0) continue;
    if (mine == all) {
      out.add(path, child);
      continue;
    }
    for (const Tensor& p : child->parameters(/*recurse=*/false))
      LOOM_CHECK(!held.count(p.impl()), "shard_stage: ", path, " holds parameters of this ",
                 "pipeline stage and of another one itself (not in a submodule)");
    collect_held(*child, path, held, out);
  }
}
}  // namespace

std::shared_ptr<FullyShardedDataParallel> shard_stage(nn::Module& model, const PipelineStage& stage,
                                                      std::shared_ptr<ProcessGroup> dp,
                                                      std::shared_ptr<ProcessGroup> tp) {
  std::unordered_set<const TensorImpl*> held;
  for (const Tensor& p : stage.held()) held.insert(p.impl());
  for (const Tensor& p : model.parameters(/*recurse=*/false))
    LOOM_CHECK(!held.count(p.impl()), "shard_stage: ", model.type_name(),
               " holds a parameter of the stage itself (not in a submodule)");
  auto modules = std::make_shared<StageModules>();
  collect_held(model, "", held, *modules);
  size_t found = modules->parameters().size();
  LOOM_CHECK(found == held.size(), "shard_stage: ", found, " of the stage's ", held.size(),
             " parameters found in its modules");
  FSDPOptions o;
  o.unit_types = {"TransformerBlock", "FusedTransformerBlock"};  // the head's Linear: the root's
  // Note [FSDP over a tensor-parallel pipeline stage]: the norms' partial gradients summed over tp
  if (tp && stage.sequence_parallel()) o.before_reduce = sequence_parallel_reduce_hook(model, tp);
  return std::make_shared<FullyShardedDataParallel>(std::move(modules), std::move(dp), o);
}

StageShards::StageShards(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> dp, int stage)
    : params_(std::move(params)), dp_(std::move(dp)), stage_(stage) {
  LOOM_CHECK(stage_ == 1 || stage_ == 2, "StageShards: ZeRO stage ", stage_,
             " (a pipeline's copies shard with --zero 1 or 2)");
  LOOM_CHECK(!params_.empty(), "StageShards: the stage has no parameter to optimize");
  autograd::NoGradGuard no_grad;
  std::vector<ParamLayout> layout;
  std::vector<size_t> order;  // reverse registration order, as DDP's first buckets
  for (size_t i = 0; i < params_.size(); ++i) {
    layout.push_back({params_[i].numel(), params_[i].dtype(), params_[i].device()});
    order.push_back(params_.size() - 1 - i);
  }
  buckets_ = make_buckets(params_,
                          compute_bucket_assignment(layout, order, kFirstBucketBytes, kBucketBytes),
                          std::nullopt, dp_->size());
  for (Bucket& b : buckets_) {  // (numel / N,) shards; the flat buffers only during reduce()
    const Tensor& first = params_[b.params.front()];
    b.shard = zeros({b.numel / dp_->size()}, {.dtype = first.dtype(), .device = first.device()});
    b.flat = Tensor(), b.views.clear();
  }
}

void StageShards::reduce() {
  autograd::NoGradGuard no_grad;
  const int n = dp_->size();
  for (Bucket& b : buckets_) {
    const Tensor& first = params_[b.params.front()];
    Tensor flat = zeros({b.numel}, {.dtype = first.dtype(), .device = first.device()});
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]];
      if (Tensor g = p.grad(); g.defined())
        slice(flat, 0, b.offsets[k], b.offsets[k] + p.numel()).copy_(reshape(g, {p.numel()}));
    }
    if (n > 1) flat.mul_(1.0 / double(n));
    Tensor mine = fresh_ ? b.shard : zeros_like(b.shard);
    dp_->reduce_scatter(mine, flat, ReduceOp::Sum)->wait();
    if (!fresh_) b.shard.add_(mine);
  }
  for (const Tensor& p : params_) {
    Tensor handle = p;
    handle.set_grad(Tensor());  // this rank's unreduced gradient: nothing may read it
  }
  fresh_ = false;
  if (ready_) ready_();
}

int64_t StageShards::gradient_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& b : buckets_) bytes += int64_t(b.shard.numel() * b.shard.element_size());
  for (const Tensor& p : params_)
    if (p.grad().defined()) bytes += int64_t(p.grad().numel() * p.grad().element_size());
  return bytes;
}

int64_t StageShards::parameter_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& p : params_) bytes += int64_t(p.numel() * p.element_size());
  return bytes;
}

}  // namespace loom::distributed
