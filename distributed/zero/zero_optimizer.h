// ZeroOptimizer: ZeRO stages 1 and 2 (Rajbhandari et al., 2020): each of N ranks keeps the
// optimizer state of 1/N of the model's elements and updates only them; the gradients reach each
// rank as its reduced shard (a reduce-scatter instead of DDP's all-reduce), and the updated
// parameters are all-gathered after every step, so every rank again holds the whole model.
// With stage 3 (distributed/fsdp/fsdp.h) the parameters are sharded too: the optimizer updates
// this rank's master shard and the wrapper gathers the parameters before each unit's forward.
// Leaves out: CUDA graph capture of the sharded step, joining uneven inputs, and optimizers that
// need a parameter's shape.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/buckets/shard_partition.h"
#include "distributed/buckets/sharded_buckets.h"
#include "distributed/ddp/ddp.h"
#include "nn/optim/optimizer.h"

namespace loom::distributed {

// Note [ZeRO stages]
// Per parameter element, fp32 training with Adam holds 4 bytes of weight, 4 of gradient and 8 of
// Adam state (exp_avg, exp_avg_sq). With N ranks:
//   DDP     4 + 4     + 8      = 16 bytes on every rank
//   ZeRO-1  4 + 4     + 8 / N  (the state sharded; the full-size gradient buckets kept)
//   ZeRO-2  4 + 4 / N + 8 / N  (the gradient too: each bucket freed once reduce-scattered)
//   ZeRO-3  4 / N + 4 / N + 8 / N (the parameters too: Note [FSDP] in distributed/fsdp/fsdp.h)
// plus, for stage 2, the buckets in flight (two of at most 25 MiB). The step:
//   backward    each bucket, when complete, is scaled by 1/N and reduce-scattered: rank r gets
//               the mean gradient of its shard (Note [ZeRO gradient shards] in
//               sharded_reduce_buckets.h);
//   step()      the shard's optimizer (the program's own kind and options, built over 1-D
//               views of this rank's slices of the parameters: Note [ZeRO partition]) updates
//               them in place; then every bucket's parameters are all-gathered from the shards
//               (stage 3: the shards are the parameters' master copy, updated in place, and
//               nothing is gathered here: FSDP gathers each unit when it next runs).
// GradScaler's inf flag and the clipping norm are sums over all gradients, so they are completed
// over the ranks (sum_over_shards): every rank makes the same skip and clip decisions.
// state_dict() gathers the state into the unsharded layout (Note [Optimizer state layout]), the
// same entries the program's optimizer would save without ZeRO: a checkpoint of N ranks loads
// into M ranks, into a run without ZeRO, and the other way round.
class ZeroOptimizer : public optim::Optimizer {
 public:
  // ddp: the model wrapped with DDPOptions::reducer.zero_stage 1 or 2 (construct it first; the
  // process group is its). full: the optimizer the program would step without ZeRO, over the
  // model's parameters (SGD, Adam or AdamW, any parameter groups): the shard's optimizer is made
  // like it, its hyper-parameters are kept equal to the shard's, and its state (a resumed run's)
  // is taken over and freed. Every rank constructs it, in the same order.
  ZeroOptimizer(DistributedDataParallel& ddp, optim::Optimizer& full);
  // The same over any sharded-gradient source: FullyShardedDataParallel for stage 3.
  ZeroOptimizer(ShardedBuckets& shards, optim::Optimizer& full);

  // The shard's update, then the parameters all-gathered (a collective).
  void step() override;
  // Releases the shard's gradients; the next backward overwrites them (it adds to them until then).
  void zero_grad() override;
  // Collectives. state_dict: the whole state, unsharded, on every rank (in CPU memory).
  // load_state_dict: each rank takes its slices of a whole (unsharded) state dict.
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& sd) override;
  bool sharded() const override { return true; }
  void sum_over_shards(Tensor& t) const override;
  Tensor clip_grad_norm_(double max_norm) override;

  int stage() const { return reducer_.zero_stage(); }
  const std::vector<Segment>& segments() const { return segs_; }
  // Bytes this rank holds now: parameters (all of them, stages 1 and 2; the shards and the units
  // gathered now, stage 3), gradients (full-size buffers allocated and shards) and optimizer
  // state (the shard's buffers).
  struct Memory {
    int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  };
  Memory memory() const;

 protected:
  std::vector<std::pair<std::string, double>> hyper_parameters(size_t group) const override;
  void set_hyper_parameter(size_t group, const std::string& name, double value) override;
  std::vector<std::string> buffer_names(size_t group) const override;
  bool counts_steps() const override;
  bool fused(size_t group) const override;

 private:
  void bind_shard_grads();   // the reducer's shards are reduced: the segments' .grad
  void all_gather_params();  // every bucket's parameters from the ranks' shards
  // Buffer `buffer` ("" = the parameter) of every segment of bucket b as this rank's shard of
  // the bucket; gather_bucket: the whole bucket of it from all ranks, in CPU memory.
  Tensor shard_of(size_t b, const std::string& buffer) const;
  Tensor gather_bucket(size_t b, const std::string& buffer) const;
  size_t full_of_seg(size_t k) const {  // segment k's parameter, numbered as the optimizer's
    return full_of_reducer_[reducer_.buckets()[segs_[k].bucket].params[segs_[k].slot]];
  }
  std::string describe_param(size_t full_index) const;

  ShardedBuckets& reducer_;  // DDP's reducer's ShardedReduceBuckets (stages 1, 2) or FSDP (3)
  ProcessGroup& pg_;
  optim::Optimizer& full_;
  std::vector<size_t> reducer_of_full_;  // the program optimizer's number -> reducer's
  std::vector<size_t> full_of_reducer_;
  std::vector<size_t> group_of_full_;
  std::vector<Segment> segs_;         // this rank's, bucket by bucket
  std::vector<Tensor> views_;         // segs_[k] as a 1-D view of its parameter
  std::vector<size_t> inner_of_seg_;  // segs_[k]'s number in the shard's optimizer
  std::unique_ptr<optim::Optimizer> inner_;
};

// The examples' --zero switch for DDP: 0 = DistributedDataParallel, 1 or 2 = ZeRO of that stage
// (DDPOptions with the stage set; the program then wraps its optimizer in a ZeroOptimizer).
// Stage 3 is a different wrapper (FullyShardedDataParallel): an error here.
DDPOptions ddp_options_for_zero(int stage);

}  // namespace loom::distributed
