// BucketReduction: the part of the Reducer (distributed/ddp/reducer.h) that differs between DDP
// and ZeRO stages 1 and 2: how the buckets are allocated and kept, how a ready gradient gets into
// its bucket, the collective a complete bucket starts, and what is left once it is done. Two
// kinds: AllReduceBuckets, DDP's, below (every rank gets the bucket's whole mean gradient; with a
// communication dtype the all-reduce runs on a rounded copy, bf16 or f16, that is copied back),
// and ShardedReduceBuckets (distributed/ddp/sharded_reduce_buckets.h: rank r gets its shard of
// it). Leaves out: everything the kinds share, which the Reducer does once
// (hooks, readiness, launching in bucket order, the end of backward), and which parameters share
// a bucket (distributed/buckets/bucket_layout.h).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "distributed/buckets/bucket_layout.h"
#include "distributed/buckets/sharded_buckets.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

// Note [Gradients as bucket views]
// Each parameter's .grad is a view into its bucket's flat buffer. At a training forward every
// parameter whose .grad is undefined (zero_grad leaves it so) gets its view, zero-filled (one
// fill per bucket), as .grad; the engine then adds the backward's gradient into it in place, so
// the gradient lands in the bucket with no copy, and the optimizer reads the reduced gradient
// from the same memory. A .grad that is defined but not the view (set by hand, or a zero_grad
// between forward and backward) is copied into the view, which then replaces it. When the last
// gradient of a bucket is ready the bucket is scaled by 1/world_size (the same, bit for bit, as
// scaling each gradient on arrival: each lands on zero) and SUM-all-reduced, so .grad ends up
// holding the mean over ranks. (ZeRO-1 binds the views the same way and reduce-scatters instead;
// ZeRO-2 binds none: Note [ZeRO gradient shards] in distributed/ddp/sharded_reduce_buckets.h.)
class BucketReduction {
 public:
  explicit BucketReduction(ProcessGroup& pg) : pg_(pg) {}
  virtual ~BucketReduction() = default;
  BucketReduction(const BucketReduction&) = delete;
  BucketReduction& operator=(const BucketReduction&) = delete;

  // ---- the buckets' memory
  // The buckets of `assignment` over params, as this reduction holds them.
  virtual std::vector<Bucket> allocate(const std::vector<Tensor>& params,
                                       const std::vector<std::vector<size_t>>& assignment) = 0;
  // Whether the Reducer may rebuild the buckets once, in arrival order (Note [Bucket rebuild]).
  virtual bool rebuildable() const { return true; }
  // At a training forward: each .grad bound to its bucket view (Note [Gradients as bucket views]).
  virtual void bind_grads(std::vector<Bucket>& buckets, std::vector<Tensor>& params);
  // In backward, when the gradient of params[b.params[k]] is ready: that gradient into slot k of
  // b (already there, when .grad is the view).
  virtual void take_grad(Bucket& b, size_t k, std::vector<Tensor>& params);
  // Whether a backward under no_sync reduces all the same.
  virtual bool reduces_under_no_sync() const { return false; }

  // ---- the collectives
  // b is complete: starts its reduction (scaled by 1/N first, so that the SUM is the mean).
  virtual void launch(Bucket& b) = 0;
  // Waits for b's reduction and puts the result where it belongs; once done, a no-op.
  virtual void finish(Bucket& b) = 0;
  // k > 0: in backward, a bucket is finished as soon as k later ones have launched (so at most
  // k + 1 are in flight); 0: every bucket is finished at the end of backward.
  virtual size_t finish_after() const { return 0; }
  // The end of a backward that reduced, every bucket finished.
  virtual void backward_done(std::vector<Tensor>& params) { (void)params; }
  // A joined rank's part of one iteration's reductions: the same collectives, with zeros
  // (Note [Join] in distributed/ddp/reducer.cpp).
  virtual void shadow(std::vector<Bucket>& buckets) = 0;
  // Fails, naming `what`, if a CUDA graph cannot hold this reduction's step (Note [Reducer under
  // graph capture] in distributed/ddp/reducer.cpp).
  virtual void check_capturable(const char* what) const { (void)what; }
  // The gradient shards a ZeroOptimizer reads; null: this reduction keeps none.
  virtual ShardedBuckets* shards() { return nullptr; }

 protected:
  // Waits for b's collective in flight, if any, and forgets it.
  static void wait(Bucket& b);

  ProcessGroup& pg_;
};

// DDP's kind: each bucket scaled by 1/N and SUM-all-reduced.
class AllReduceBuckets : public BucketReduction {
 public:
  // comm_dtype: when set and not a bucket's own dtype, that bucket is all-reduced in it.
  AllReduceBuckets(ProcessGroup& pg, std::optional<DType> comm_dtype)
      : BucketReduction(pg), comm_dtype_(comm_dtype) {}

  std::vector<Bucket> allocate(const std::vector<Tensor>& params,
                               const std::vector<std::vector<size_t>>& assignment) override;
  void launch(Bucket& b) override;
  void finish(Bucket& b) override;
  void shadow(std::vector<Bucket>& buckets) override;

 private:
  std::optional<DType> comm_dtype_;
};

}  // namespace loom::distributed
