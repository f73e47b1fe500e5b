// The differentiable all-reduce behind SyncBatchNorm and the walk that switches a model's
// BatchNorm2d layers to it (distributed/sync_batch_norm.h). Leaves out: the statistics
// themselves (nn/batch_norm_sync.cpp).
#include "distributed/sync_batch_norm.h"

#include "distributed/collective_grad.h"
#include "nn/fused.h"

namespace loom::distributed {

Tensor all_reduce_sum(const Tensor& t, ProcessGroup& group) {
  return with_group_backward("all_reduce_sum", t, summed_copy(t, group), group, summed_copy);
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
