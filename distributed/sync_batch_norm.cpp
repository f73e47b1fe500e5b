// The differentiable all-reduce behind SyncBatchNorm and the walk that switches a model's
// BatchNorm2d layers to it (distributed/sync_batch_norm.h). Leaves out: the statistics
// themselves (nn/batch_norm_sync.cpp).
#include "distributed/sync_batch_norm.h"

#include "autograd/function.h"
#include "nn/fused.h"

namespace loom::distributed {

namespace {

// A copy of t (clone is always contiguous) summed in place over the group; waits for it (Gloo: on
// the host; NCCL: the compute stream waits).
Tensor summed_copy(const Tensor& t, ProcessGroup& group) {
  Tensor out = t.detach().clone();
  group.all_reduce(out, ReduceOp::Sum)->wait();
  return out;
}

}  // namespace

Tensor all_reduce_sum(const Tensor& t, ProcessGroup& group) {
  Tensor out = summed_copy(t, group);
  if (!autograd::any_requires_grad({t})) return out;
  ProcessGroup* g = &group;  // the caller keeps the group alive until backward has run
  return record("all_reduce_sum", out, {t},
                [g](const Tensor& grad) -> Grads { return {summed_copy(grad, *g)}; });
}

ProcessGroupSum::ProcessGroupSum(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {
  LOOM_CHECK(group_ != nullptr, "ProcessGroupSum: the process group is null");
}

Tensor ProcessGroupSum::operator()(const Tensor& t) const { return all_reduce_sum(t, *group_); }

namespace {

// Switches m if it is a BatchNorm2d or a fused module holding one, then its children.
int convert(nn::Module& m, const std::shared_ptr<const nn::CrossProcessSum>& sum) {
  int n = 0;
  nn::BatchNorm2d* bn = dynamic_cast<nn::BatchNorm2d*>(&m);
  if (auto* f = dynamic_cast<nn::BatchNormReLU2d*>(&m)) bn = f->bn.get();
  if (auto* f = dynamic_cast<nn::BatchNormReLUMaxPool2d*>(&m)) bn = f->bn.get();
  if (bn && !bn->sync) {
    bn->sync = sum;
    ++n;
  }
  for (const auto& [name, child] : m.named_children()) n += convert(*child, sum);
  return n;
}

}  // namespace

int convert_sync_batchnorm(nn::Module& model, std::shared_ptr<ProcessGroup> group) {
  LOOM_CHECK(group != nullptr, "convert_sync_batchnorm: the process group is null");
  if (group->size() == 1) return 0;
  return convert(model, std::make_shared<ProcessGroupSum>(std::move(group)));
}

}  // namespace loom::distributed
