// ShardedBuckets: what a ZeRO optimizer needs from the part of the program that reduces the
// gradients into per-rank shards. DDP's Reducer has one with a ZeRO stage (Reducer::shards(), its
// ShardedReduceBuckets: stages 1 and 2, the parameters stay whole on every rank);
// FullyShardedDataParallel is the other (stage 3: each rank keeps only its shard of the
// parameters too). Leaves out: the optimizer itself (distributed/zero/zero_optimizer.h) and
// the partition it computes from the buckets (distributed/buckets/shard_partition.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "distributed/buckets/bucket_layout.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

// The buckets are the unit of sharding: each is a flat run of whole parameters padded to N * S
// elements, of which rank r owns [r * S, (r + 1) * S) (Note [ZeRO partition]). Bucket::shard is
// this rank's reduced gradient of those S elements.
class ShardedBuckets {
 public:
  virtual ~ShardedBuckets() = default;
  virtual int zero_stage() const = 0;
  virtual ProcessGroup& shard_group() const = 0;
  // Every parameter that is reduced, and the buckets as indices into this list.
  virtual const std::vector<Tensor>& params() const = 0;
  virtual const std::vector<Bucket>& buckets() const = 0;
  // Called at the end of every backward that reduced, once the shards hold the mean gradient.
  virtual void set_shards_ready_hook(std::function<void()> f) = 0;
  // The next reduction overwrites the shards instead of adding to them.
  virtual void zero_shards() = 0;
  // Bytes this rank holds now: gradients (full-size buffers allocated, and the shards) and
  // parameters (whole ones, and the shards of stage 3).
  virtual int64_t gradient_bytes() const = 0;
  virtual int64_t parameter_bytes() const = 0;
  // Stage 3: bucket b's parameter values as this rank's S-element shard (the master copy, which
  // the optimizer updates; the model's parameters are gathered from the shards when needed).
  // Stages 1 and 2: undefined (the optimizer updates views of the whole parameters).
  virtual Tensor value_shard(size_t b) const {
    (void)b;
    return {};
  }
};

}  // namespace loom::distributed
