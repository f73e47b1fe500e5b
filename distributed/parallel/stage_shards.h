// Sharding one pipeline stage over its data-parallel copies. StageShards: ZeRO-1 and ZeRO-2; the
// stage's gradients, complete once the schedule has run every micro-batch, are mean-reduce-
// scattered over dp into bucket shards, the ShardedBuckets a ZeroOptimizer steps (Note [ZeRO
// stages] in distributed/zero/zero_optimizer.h). shard_stage: ZeRO-3, the stage's modules under
// FSDP (Note [FSDP over a pipeline stage] in distributed/fsdp/fsdp.h), its blocks possibly split
// over tp (Note [FSDP over a tensor-parallel pipeline stage]). Leaves out: the schedule
// (distributed/pipeline), the optimizer (distributed/zero), reducing ZeRO-1/2's gradients during
// backward (DDP's Reducer does; a pipeline's step is many backwards whose tied head is summed over
// the stages only after the last).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "distributed/buckets/sharded_buckets.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/pipeline/pipeline_stage.h"

namespace loom::distributed {

// Note [ZeRO over a pipeline stage]
// DDP's ZeRO reduces each bucket during backward. A pipeline step is M backwards per stage, after
// which the tied head's two gradients are summed over the stages; only then is the stage's gradient
// whole. So the reduction waits for the schedule: each bucket (the stage's parameters laid out as
// DDP lays them out, padded to N equal shards over the N dp ranks) is copied from the .grad into a
// flat buffer, scaled by 1/N and SUM-reduce-scattered, the .grad released, and the ZeroOptimizer
// steps its shard and all-gathers the parameters. Within the step the full-size gradient exists
// (the micro-batches add into it), so under a pipeline ZeRO-1 and ZeRO-2 hold the same memory: the
// gradient shards and the optimizer state's 1/N between steps, the whole gradient during a step.
class StageShards : public ShardedBuckets {
 public:
  // `params`: the stage's parameters the optimizer steps (every dp rank lists the same ones, in
  // the same order); `stage`: 1 or 2 (which the ZeroOptimizer names).
  StageShards(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> dp, int stage);

  // After the schedule: every bucket's mean gradient over dp into this rank's shard (added to it
  // until zero_shards()), the parameters' .grad released. A collective over dp.
  void reduce();

  int zero_stage() const override { return stage_; }
  ProcessGroup& shard_group() const override { return *dp_; }
  const std::vector<Tensor>& params() const override { return params_; }
  const std::vector<Bucket>& buckets() const override { return buckets_; }
  void set_shards_ready_hook(std::function<void()> f) override { ready_ = std::move(f); }
  void zero_shards() override { fresh_ = true; }
  int64_t gradient_bytes() const override;   // the shards, and any .grad alive now
  int64_t parameter_bytes() const override;  // the stage's parameters (whole on every dp rank)

 private:
  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> dp_;
  int stage_;
  std::vector<Bucket> buckets_;  // flat buffers released: only the shards live between steps
  std::function<void()> ready_;
  bool fresh_ = true;
};

// Note [FSDP over a tensor-parallel pipeline stage]
// Under --pp --tp --zero 3 (torchtitan's 3D layout) the blocks are split over tp before the cut,
// so each tp rank's stage holds its own shares of the split tensors (the attention's and the MLP's
// matrices) and a copy of the whole ones (norms, embeddings, the head, row-parallel biases). Each
// tp rank wraps its stage in its own FSDP over the stage's dp group (the ranks of one pp and one tp
// coordinate): the shares and the whole tensors alike are laid out and sharded as for any stage,
// every tp rank cutting the same units of the same sizes. The whole tensors stay equal over tp,
// as under ZeRO-1/2: their gradients are the same on every tp rank (sequence parallel's after the
// sum below), and the same AdamW steps the same shards. What tp adds:
//   sequence parallel  a block's norms and row-parallel biases get the gradient of the rank's
//                      positions only (Note [Sequence parallel]); FSDP reduce-scatters a unit's
//                      gradients over dp inside each micro-batch's backward, so the sum over tp
//                      must come first: FSDPOptions::before_reduce sums the unit's
//                      sequence-parallel gradients over tp (one all-reduce per unit and
//                      micro-batch), then they are reduce-scattered with the rest. (The root holds
//                      none of them: the blocks are the units.)
//   the clip, the inf flag  ZeroOptimizer sums the shards' squares over dp, then the model share's
//                      sum goes over pp and tp, the split tensors counted on every tp rank and the
//                      whole ones on tp rank 0 only (PipelineModel::set_model_share), as with
//                      ZeRO-1/2.
//   checkpoints        FSDP gathers the stage over dp (full_params), each tp rank's shares are
//                      made whole over tp, and the stage sends them over pp (Note [Whole-layout
//                      checkpoints]); loading takes the rank's share of each tensor and writes it
//                      back into the dp shards.

// ZeRO-3 over a stage's copies: the modules the stage computes with (PipelineStage::held(), the
// outermost modules of `model` whose parameters it all holds: the embeddings, the blocks, the
// final norm, the head) gathered under one module and wrapped in FSDP over `dp`, each transformer
// block a unit and the rest the root, which the stage holds for its step (Note [FSDP over a
// pipeline stage] in distributed/fsdp/fsdp.h). `tp` (null: none) is the group the blocks are split
// over; under sequence parallel each unit's norm gradients are summed over it before the
// reduce-scatter (Note [FSDP over a tensor-parallel pipeline stage]). A collective over dp (rank
// 0's weights broadcast).
std::shared_ptr<FullyShardedDataParallel> shard_stage(nn::Module& model, const PipelineStage& stage,
                                                      std::shared_ptr<ProcessGroup> dp,
                                                      std::shared_ptr<ProcessGroup> tp = nullptr);

}  // namespace loom::distributed
