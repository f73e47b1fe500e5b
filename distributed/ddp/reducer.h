// Reducer: DDP's gradient machinery. Post-accumulate hooks put each gradient into its bucket,
// a bucket's SUM all-reduce starts as soon as its last gradient is ready (buckets strictly in
// index order), and the end of backward waits for them all. Also: unused parameters, no_sync,
// the one-time rebuild of the buckets in arrival order, low-precision communication, the
// zero-gradient "shadow" iteration a joined rank runs, and what a captured step needs settled
// first (Note [Reducer under graph capture]). Leaves out: the module wrapper (ddp.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/buckets/bucket_layout.h"
#include "distributed/buckets/sharded_buckets.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

struct ReducerOptions {
  size_t first_bucket_cap_bytes = size_t(1) << 20;  // 1 MiB
  size_t bucket_cap_bytes = size_t(25) << 20;       // 25 MiB
  bool find_unused_parameters = false;
  bool rebuild_buckets = true;      // once, after the first iteration, in arrival order
  std::optional<DType> comm_dtype;  // kBF16 / kF16: all-reduce a rounded copy
  // ZeRO (Note [ZeRO gradient shards]): 0 = all-reduce (DDP); 1 = each bucket reduce-scattered
  // into this rank's shard, the full-size buckets kept; 2 = the same, and each full-size bucket
  // freed as soon as it is reduced. Set by distributed/zero/zero_optimizer.h's users through
  // DDPOptions; buckets are then padded to a multiple of the world size and never rebuilt.
  int zero_stage = 0;
};

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

// Note [Gradients as bucket views]
// Each parameter's .grad is a view into its bucket's flat buffer. At a training forward every
// parameter whose .grad is undefined (zero_grad leaves it so) gets its view, zero-filled (one
// fill per bucket), as .grad; the engine then adds the backward's gradient into it in place, so
// the gradient lands in the bucket with no copy, and the optimizer reads the reduced gradient
// from the same memory. A .grad that is defined but not the view (set by hand, or a zero_grad
// between forward and backward) is copied into the view, which then replaces it. When the last
// gradient of a bucket is ready the bucket is scaled by 1/world_size (the same, bit for bit, as
// scaling each gradient on arrival: each lands on zero) and SUM-all-reduced, so .grad ends up
// holding the mean over ranks.
class Reducer : public ShardedBuckets, public std::enable_shared_from_this<Reducer> {
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
  const std::vector<Tensor>& params() const override { return params_; }
  const std::vector<Bucket>& buckets() const override { return buckets_; }

  // ---- ZeRO (Note [ZeRO gradient shards]; the interface in distributed/buckets/sharded_buckets.h)
  // ----
  int zero_stage() const override { return opt_.zero_stage; }
  ProcessGroup& shard_group() const override { return *pg_; }
  // Called at the end of every synchronised backward once the shards hold the reduced gradient.
  void set_shards_ready_hook(std::function<void()> f) override { on_shards_ready_ = std::move(f); }
  // The next reduction overwrites the shards instead of adding to them.
  void zero_shards() override { shards_fresh_ = true; }
  // Bytes of gradient memory this rank holds now: full-size buckets allocated plus shards.
  int64_t gradient_bytes() const override;
  // The whole parameters, on every rank.
  int64_t parameter_bytes() const override;

 private:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> pg, ReducerOptions opt);
  void install_hooks();
  void build_buckets(const std::vector<size_t>& order);
  void rebuild_if_due();  // Note [Bucket rebuild]: once, in rank 0's arrival order
  void bind_grads();
  void on_grad_ready(size_t i);
  void mark_ready(size_t i);
  void launch_ready_buckets();
  void finalize();
  void launch(Bucket& b);
  void finish(Bucket& b);  // waits for b's reduction; ZeRO: adds it into the shard, frees

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions opt_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<size_t> slot_of_;    // parameter -> index inside its bucket

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
  std::function<void()> on_shards_ready_;
  bool shards_fresh_ = true;
  double last_wait_s_ = 0;
};

}  // namespace loom::distributed
