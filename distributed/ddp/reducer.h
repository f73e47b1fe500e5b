// Reducer: DDP's gradient machinery. Post-accumulate hooks put each gradient into its bucket,
// a bucket's reduction starts as soon as its last gradient is ready (buckets strictly in index
// order), and the end of backward waits for them all. Also: unused parameters, no_sync, the
// one-time rebuild of the buckets in arrival order, the zero-gradient "shadow" iteration a joined
// rank runs, and what a captured step needs settled first (Note [Reducer under graph capture]).
// Leaves out: the module wrapper (ddp.h), and how a bucket is held and reduced: its
// BucketReduction (distributed/ddp/bucket_reduction.h: DDP's all-reduce, ZeRO's reduce-scatter).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/buckets/bucket_layout.h"
#include "distributed/buckets/sharded_buckets.h"
#include "distributed/ddp/bucket_reduction.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

struct ReducerOptions {
  size_t first_bucket_cap_bytes = size_t(1) << 20;  // 1 MiB
  size_t bucket_cap_bytes = size_t(25) << 20;       // 25 MiB
  bool find_unused_parameters = false;
  bool rebuild_buckets = true;      // once, after the first iteration, in arrival order
  std::optional<DType> comm_dtype;  // kBF16 / kF16: all-reduce a rounded copy
  // ZeRO (Note [ZeRO gradient shards] in distributed/ddp/sharded_reduce_buckets.h): 0 =
  // all-reduce (DDP); 1 = each bucket reduce-scattered into this rank's shard, the full-size
  // buckets kept; 2 = the same, and each full-size bucket freed as soon as it is reduced. Set by
  // distributed/zero/zero_optimizer.h's users through DDPOptions; buckets are then padded to a
  // multiple of the world size and never rebuilt.
  int zero_stage = 0;
  // Called with a bucket's parameters and their gradients in the bucket (its views, in the
  // parameters' shapes) just before the bucket's reduction is launched, in bucket order on every
  // rank; it may change the gradients in place. Tensor parallel's sequence parallel under ZeRO
  // sums the norms' partial gradients over tp here (sequence_parallel_bucket_hook), before the
  // reduce-scatter leaves each rank only its shard.
  std::function<void(const std::vector<Tensor>& params, const std::vector<Tensor>& grads)>
      before_reduce{};
};

// The Reducer is the part of DDP that is the same however a bucket is reduced: the hooks, the
// buckets' readiness, launching them strictly in index order, the end of backward, unused
// parameters, the rebuild and the shadow iteration. What differs (where a bucket's gradients are
// held, its collective, what is left once it is done) is its BucketReduction, chosen once from
// ReducerOptions::zero_stage: AllReduceBuckets for DDP (Note [Gradients as bucket views] in
// distributed/ddp/bucket_reduction.h), ShardedReduceBuckets for ZeRO stages 1 and 2.
class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // params: the parameters that require grad, in registration order, with their dotted names.
  static std::shared_ptr<Reducer> create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions opt);

  // At the start of a training forward (grad mode on): fails if the previous iteration's
  // reduction never finished (Note [Unfinished reduction]), rebuilds the buckets once, and binds
  // every .grad to its bucket view. sync = false (no_sync): the backward only accumulates.
  void prepare_for_forward(bool sync);
  // After the forward: with find_unused_parameters, walks the graph from the outputs and
  // remembers the parameters it cannot reach (they are marked ready at the backward's start).
  void prepare_for_backward(const std::vector<Tensor>& outputs);

  // CUDA graphs (Note [Reducer under graph capture]): before capturing a step, after at least
  // one eager step, rebuilds the buckets if that is due; refuses (an error naming `what` and the
  // reason) what a captured step cannot hold. check_capturable only checks.
  void prepare_for_capture();
  void check_capturable(const char* what) const;
  bool rebuild_due() const { return opt_.rebuild_buckets && order_recorded_ && !rebuilt_; }

  // A joined rank's part of one iteration of the ranks still training: the same all-reduces,
  // with zero gradients (Note [Join]).
  void shadow_iteration();

  // Runs at the end of each synchronised backward, before waiting for the all-reduces (a profiler
  // marks "backward computed" here).
  void set_backward_computed_hook(std::function<void()> f) { on_backward_computed_ = std::move(f); }
  // Seconds the last backward's end waited for all-reduces (host wall clock; on CUDA the wait is
  // a stream dependency, so this is ~0 and exposure must be measured with events).
  double last_wait_seconds() const { return last_wait_s_; }

  // The buckets as parameter names, bucket 0 first (tests, docs, debugging).
  std::vector<std::vector<std::string>> bucket_names() const;
  bool buckets_rebuilt() const { return rebuilt_; }
  // The tensors each bucket all-reduces (flat, or its low-precision copy), bucket 0 first: a
  // benchmark times them alone to see how much of the communication backward hides.
  std::vector<Tensor> bucket_tensors() const;
  const std::vector<Tensor>& params() const { return params_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Bytes of gradient memory this rank holds now: full-size buckets allocated plus shards.
  int64_t gradient_bytes() const { return bucket_bytes(buckets_); }
  // ZeRO (zero_stage 1 or 2): the gradient shards a ZeroOptimizer reads; null without ZeRO.
  ShardedBuckets* shards() { return reduction_->shards(); }

 private:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> pg, ReducerOptions opt);
  std::unique_ptr<BucketReduction> make_reduction();
  void install_hooks();
  void build_buckets(const std::vector<size_t>& order);
  void rebuild_if_due();  // Note [Bucket rebuild]: once, in rank 0's arrival order
  void on_grad_ready(size_t i);
  void mark_ready(size_t i);
  void launch_ready_buckets();
  void finalize();
  void drop_unused_grads();  // find_unused_parameters: the end of backward's usage count

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions opt_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<BucketReduction> reduction_;  // over params_ and buckets_
  std::vector<size_t> bucket_of_;               // parameter -> bucket
  std::vector<size_t> slot_of_;                 // parameter -> index inside its bucket

  // One iteration's state.
  bool expect_hooks_ = false;      // a synchronised training forward ran; its backward reduces
  bool started_ = false;           // the backward's first hook ran (the callback is queued)
  bool require_finalize_ = false;  // a reduction started and has not finished
  std::vector<bool> ready_;
  size_t next_bucket_ = 0;      // buckets launch strictly in this order
  std::vector<size_t> unused_;  // find_unused_parameters: not reachable from the outputs
  std::vector<uint8_t> locally_used_;

  std::vector<size_t> arrival_;  // first iteration: the order gradients arrived in
  bool order_recorded_ = false, rebuilt_ = false;
  std::function<void()> on_backward_computed_;
  double last_wait_s_ = 0;
};

}  // namespace loom::distributed
