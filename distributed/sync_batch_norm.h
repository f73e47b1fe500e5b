// SyncBatchNorm for loom: convert_sync_batchnorm(model, group) makes every BatchNorm2d of a model
// take its training statistics over all the group's processes (Note [SyncBatchNorm] in
// nn/batch_norm_sync.cpp), as torch.nn.SyncBatchNorm.convert_sync_batchnorm does; and the
// differentiable all-reduce it runs on. Use it for models with BatchNorm under DDP when each
// process's batch is small (the statistics of 8 images are noisy; of 8 x N, less so), and when N
// processes must train exactly as one. Leaves out: sub-groups of a job (pass new_group's group),
// CUDA-graph capture of these collectives, BatchNorm1d/3d (loom has none).
#pragma once

#include <memory>

#include "distributed/process_group/process_group.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace loom::distributed {

// t summed over the group's processes (a copy; t is unchanged). Autograd: the gradient of t is
// the group's sum of the output's gradients. Every process must call it in the same order.
Tensor all_reduce_sum(const Tensor& t, ProcessGroup& group);

// nn::CrossProcessSum over a ProcessGroup (kept alive by the shared_ptr).
class ProcessGroupSum : public nn::CrossProcessSum {
 public:
  explicit ProcessGroupSum(std::shared_ptr<ProcessGroup> group);
  Tensor operator()(const Tensor& t) const override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// Sets every BatchNorm2d in `model` (also those inside nn::fuse's fused modules) to synchronise
// over `group`; returns how many. Call it before wrapping the model in DDP. A group of one
// process leaves the model as it is (returns 0): its statistics are already the batch's.
int convert_sync_batchnorm(nn::Module& model, std::shared_ptr<ProcessGroup> group);

}  // namespace loom::distributed
