// ShardedReduceBuckets: the Reducer's ZeRO mode (stages 1 and 2), a bucket reduction that
// reduce-scatters each bucket so that rank r keeps only its shard of the mean gradient, and the
// ShardedBuckets a ZeroOptimizer reads those shards through. ShardedTransientBuckets is stage 2:
// the same, with each full-size bucket alive only while it is filled and reduced. Leaves out: the
// optimizer over the shards (distributed/zero/zero_optimizer.h), who owns which elements
// (distributed/buckets/shard_partition.h), and stage 3 (distributed/fsdp/fsdp.h).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "distributed/ddp/bucket_reduction.h"

namespace loom::distributed {

struct ReducerOptions;

// Note [ZeRO gradient shards]
// With zero_stage > 0 a bucket's flat buffer (padded with zeros to N * S elements, N ranks) is
// SUM-reduce-scattered after the same 1/N scaling, so rank r receives the mean gradient of
// elements [r * S, (r + 1) * S) of the bucket in Bucket::shard (S elements): the part of the
// gradient its ZeRO optimizer updates. A parameter may straddle two ranks' shards (the partition
// ignores parameter boundaries: Note [ZeRO partition] in distributed/buckets/shard_partition.h).
// The shards add up over the synchronised backwards until zero_shards() (the optimizer's
// zero_grad), like .grad. After the reduction the parameters' .grad are released (they held
// this rank's unreduced gradient, which nothing may read). Stage 1 keeps each bucket's buffer
// between steps (and so honours no_sync: micro-batches accumulate locally and one
// reduce-scatter sends the sum). Stage 2 binds no .grad at forward: when a gradient arrives it is
// copied into its bucket, allocated then, and dropped; a bucket's buffer is freed once its
// reduce-scatter is done (at the latest two buckets later), so the full-size gradient never
// exists at once; it reduces in every backward, no_sync included (the full gradient that
// no_sync would keep is what stage 2 removes), and the micro-batches add up in the shards.
// The buckets are never rebuilt: the optimizer's shards are laid out on them.

// ZeRO stage 1: the full-size buckets kept between steps, the .grad views into them (Note
// [Gradients as bucket views] in distributed/ddp/bucket_reduction.h).
class ShardedReduceBuckets : public BucketReduction, public ShardedBuckets {
 public:
  // params, buckets: the Reducer's, which owns this reduction (so they outlive it).
  ShardedReduceBuckets(ProcessGroup& pg, const std::vector<Tensor>& params,
                       const std::vector<Bucket>& buckets)
      : BucketReduction(pg), params_(params), buckets_(buckets) {}

  // ---- BucketReduction: each bucket padded to N * S elements, with its S-element shard.
  std::vector<Bucket> allocate(const std::vector<Tensor>& params,
                               const std::vector<std::vector<size_t>>& assignment) override;
  bool rebuildable() const override { return false; }
  void launch(Bucket& b) override;
  void finish(Bucket& b) override;
  void backward_done(std::vector<Tensor>& params) override;
  void shadow(std::vector<Bucket>& buckets) override;      // an error: no join
  void check_capturable(const char* what) const override;  // an error: runs eagerly
  ShardedBuckets* shards() override { return this; }

  // ---- ShardedBuckets (distributed/buckets/sharded_buckets.h)
  int zero_stage() const override { return 1; }
  ProcessGroup& shard_group() const override { return pg_; }
  const std::vector<Tensor>& params() const override { return params_; }
  const std::vector<Bucket>& buckets() const override { return buckets_; }
  // Called at the end of every synchronised backward once the shards hold the reduced gradient.
  void set_shards_ready_hook(std::function<void()> f) override { on_shards_ready_ = std::move(f); }
  // The next reduction overwrites the shards instead of adding to them.
  void zero_shards() override { shards_fresh_ = true; }
  // Full-size buckets allocated plus shards; the whole parameters, on every rank.
  int64_t gradient_bytes() const override { return bucket_bytes(buckets_); }
  int64_t parameter_bytes() const override;

 private:
  const std::vector<Tensor>& params_;
  const std::vector<Bucket>& buckets_;
  std::function<void()> on_shards_ready_;
  bool shards_fresh_ = true;
};

// ZeRO stage 2: what changes from stage 1 (Note [ZeRO gradient shards]): no full-size gradient
// between steps, and a bucket's buffer only from its first gradient until its reduction is done.
class ShardedTransientBuckets : public ShardedReduceBuckets {
 public:
  using ShardedReduceBuckets::ShardedReduceBuckets;

  std::vector<Bucket> allocate(const std::vector<Tensor>& params,
                               const std::vector<std::vector<size_t>>& assignment) override;
  void bind_grads(std::vector<Bucket>&, std::vector<Tensor>&) override {}
  void take_grad(Bucket& b, size_t k, std::vector<Tensor>& params) override;
  bool reduces_under_no_sync() const override { return true; }
  void finish(Bucket& b) override;
  size_t finish_after() const override { return 2; }
  int zero_stage() const override { return 2; }
};

// The reduction of opt.zero_stage (1 or 2) over the Reducer's params and buckets. Errors: another
// stage, and the options ZeRO does not support (comm_dtype, find_unused_parameters).
std::unique_ptr<BucketReduction> make_zero_reduction(const ReducerOptions& opt, ProcessGroup& pg,
                                                     const std::vector<Tensor>& params,
                                                     const std::vector<Bucket>& buckets);

}  // namespace loom::distributed
