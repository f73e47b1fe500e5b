// FullyShardedDataParallel: ZeRO stage 3 (Rajbhandari et al., 2020; PyTorch's FSDP). Each of N
// ranks keeps 1/N of the parameters, of their gradients and (through a ZeroOptimizer) of the
// optimizer state; a unit of the model (a transformer block, a ResNet block, a Linear) has its
// parameters whole only while it computes. Leaves out: CUDA graph capture, uneven inputs (join),
// parameters of several dtypes or devices in one unit, CPU offload, and per-rank checkpoint files
// (checkpoints are gathered into the unsharded layout, so they resume on any number of ranks).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/buckets/sharded_buckets.h"
#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace loom::distributed {

// Note [FSDP]
// Construction splits the model into units: every module whose type is in unit_types, outermost
// first (a unit's descendants belong to it), plus the root, which holds every other parameter
// (GPT's embeddings, its final LayerNorm; a parameter two units share, like a tied embedding, goes
// to the root too). Each unit's parameters are laid end to end in one flat buffer padded to N * S
// elements; rank r keeps elements [r * S, (r + 1) * S) as its master shard (the partition of Note
// [ZeRO partition], with a unit as the bucket), and each parameter becomes a view of the flat
// buffer, whose memory is released between uses (Note [Released storage] in core/storage.h).
// One training step, unit by unit:
//   forward     the root is all-gathered at the wrapper's forward and kept until the end of
//               backward. A unit's forward hooks (Note [Forward hooks] in nn/module.h) all-gather
//               it just before its forward (and start the all-gather of the unit that ran next in
//               the previous step: prefetch) and release it just after, replacing its outputs with
//               identities whose backward is the unit's "pre-backward".
//   backward    the pre-backward all-gathers the unit again (the tensors autograd saved see the new
//               memory: they share the storage) and starts the all-gather of the unit that ran
//               before it. When every parameter of the unit has its gradient (post-accumulate
//               hooks), the gradients are copied into one flat buffer, scaled by 1/N and
//               SUM-reduce-scattered: rank r adds the mean gradient of its S elements into the
//               unit's gradient shard (Bucket::shard), and the unit is released again. At the
//               end of backward the root is reduced the same way, units whose parameters did not
//               all receive a gradient are reduced with zeros for the missing ones, and the
//               ZeroOptimizer is told the shards are ready.
//   step        ZeroOptimizer (stage 3) updates the master shards in place; nothing is gathered.
// Under activation checkpointing a unit is gathered again for the recomputation, which runs in
// backward and keeps it (no release in between). Gradient accumulation reduces every micro-batch
// (the shards add up; there is no no_sync: keeping the full gradient is what stage 3 avoids).
// Peak parameter memory per rank: the shards, the root, and two units (the one computing and the
// one prefetched). A unit its parent calls without the hooks reads released memory: an error
// naming the parameter (Note [Released storage]), never garbage.
// Note [FSDP mixed precision]
// With param_dtype = kBF16 each rank keeps its shards in fp32 (the master copy the optimizer
// updates) and a unit is gathered as bf16: the shard is rounded to bf16, all-gathered (half the
// bytes) into a bf16 flat buffer, and the parameters are bf16 views of it, so forward and backward
// compute in bf16 (floating inputs of the wrapper's forward are cast to bf16 too, as PyTorch's
// FSDP does). Gradients arrive in bf16 and are copied into an fp32 flat buffer before the
// reduce-scatter: the reduction and the gradient shards are fp32. FullParams gathers the fp32
// master instead and points the parameters at it while it lives, so checkpoints hold fp32
// weights, and a run saved with mixed precision resumes without it (and the other way round).
struct FSDPOptions {
  // Module types that become units (outermost first).
  std::vector<std::string> unit_types = {
      "TransformerBlock", "FusedTransformerBlock", "BasicBlock", "Bottleneck", "Linear", "Conv2d"};
  bool prefetch = true;  // all-gather the next unit while this one computes
  // Note [FSDP mixed precision]: the dtype units are gathered and computed in (kBF16 or kF16);
  // the shards stay in the parameters' own dtype.
  std::optional<DType> param_dtype;
  // Called with a unit's parameters (unit 0: the root) just before their gradients are copied into
  // the flat buffer and reduce-scattered, on every rank in the same order (a hook may run a
  // collective over another group: sequence parallel's norms summed over tp first,
  // sequence_parallel_reduce_hook in distributed/tensor_parallel/sequence_parallel.h, Note [FSDP
  // over a tensor-parallel pipeline stage] in distributed/parallel/stage_shards.h).
  std::function<void(size_t unit, const std::vector<Tensor>& params)> before_reduce{};
};

class FullyShardedDataParallel : public nn::Module, public ShardedBuckets {
 public:
  // pg null: the world group. Every rank constructs it, in the same order, after the model is on
  // its device: rank 0's parameters are broadcast, then each rank keeps its shards. The program's
  // optimizer goes into a ZeroOptimizer over this wrapper (distributed/zero/zero_optimizer.h).
  explicit FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                    std::shared_ptr<ProcessGroup> pg = nullptr,
                                    FSDPOptions options = {});
  ~FullyShardedDataParallel() override;

  // The root gathered, the model's forward (its units gather themselves); without grad mode the
  // root is released again at the end.
  Tensor forward(const Tensor& x) override;
  // The wrapped model's own loss (nn::Module::has_loss: GPT's head and cross-entropy as one op),
  // with the same gathering around it as forward.
  bool has_loss() const override { return module_->has_loss(); }
  Tensor loss(const Tensor& x, const Tensor& y) override;
  nn::Module& module() { return *module_; }
  // Rank 0's buffers (BatchNorm statistics) to every rank (a collective; also done at
  // construction). Buffers are not sharded, and each rank updates its own in training.
  void sync_buffers();
  ProcessGroup& process_group() { return *pg_; }

  // The units as their module names ("" = the root), unit 0 the root; and their element counts.
  std::vector<std::string> unit_names() const;

  // Note [FSDP over a pipeline stage]
  // A pipeline stage (distributed/parallel/pipeline_model.h) never calls this wrapper's forward:
  // its schedule calls the stage's modules itself, several micro-batches' forwards before their
  // backwards, so the root cannot be gathered at a forward and released at the end of its
  // backward. The stage holds the root instead: hold_root() gathers it for the whole step (or one
  // evaluation batch); the units gather and release themselves around each forward and backward as
  // always and reduce-scatter each micro-batch's gradients into their shards, where the M
  // micro-batches add up (torchtitan's default; FSDP has no no_sync); the end of each backward
  // leaves the root gathered and unreduced, its gradient adding up in .grad; after the schedule
  // (which has summed a tied head's two gradients over the stages in .grad)
  // release_root(/*reduce=*/true) reduce-scatters the root's gradient once and releases it.
  void hold_root();
  // Releases the held root; with `reduce` first reduce-scatters its gradient into its shard and
  // tells the optimizer the shards are ready. A collective over the group.
  void release_root(bool reduce);

  // Every parameter whole on every rank while the returned guard lives (a collective in the
  // constructor; nothing is released until the guard ends, forwards included): for state_dict()
  // and load_state_dict() of the model, or sampling from it. With writeback each rank copies its
  // part of the values back into its shards when the guard ends (after a load).
  class FullParams {
   public:
    FullParams(FullyShardedDataParallel& f, bool writeback);
    ~FullParams();
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;

   private:
    FullyShardedDataParallel& f_;
    bool writeback_;
  };
  std::unique_ptr<FullParams> full_params(bool writeback = false) {
    return std::make_unique<FullParams>(*this, writeback);
  }

  // ---- ShardedBuckets (what ZeroOptimizer reads) ----
  int zero_stage() const override { return 3; }
  ProcessGroup& shard_group() const override { return *pg_; }
  const std::vector<Tensor>& params() const override { return params_; }
  const std::vector<Bucket>& buckets() const override { return layout_; }
  void set_shards_ready_hook(std::function<void()> f) override { on_shards_ready_ = std::move(f); }
  void zero_shards() override;
  int64_t gradient_bytes() const override;
  int64_t parameter_bytes() const override;
  Tensor value_shard(size_t b) const override { return units_.at(b).value; }

 private:
  enum class State { Released, Gathering, Gathered };
  struct Unit {
    std::string name;               // the module's dotted name; "" for the root
    nn::Module* module = nullptr;   // null for the root
    std::shared_ptr<Storage> full;  // the flat gathered buffer's memory (Note [Released storage])
    Tensor flat;                    // (numel,) over `full`, in the compute dtype
    Tensor value;                   // (numel / N,) this rank's master shard
    Tensor sent;                    // the shard rounded to the compute dtype, while gathering
    Tensor master;                  // (numel,) the master gathered while FullParams lives (mixed)
    State state = State::Gathered;
    std::shared_ptr<Work> gather;  // the all-gather in flight (Gathering)
    uint64_t version = 0;          // the storage's version before it (restored after)
    bool in_backward = false;      // gathered for this backward, gradients not yet reduced
    size_t grads_pending = 0;      // its parameters still without a gradient in this backward
  };
  struct Reduction {  // a reduce-scatter in flight and the buffers it reads and writes
    size_t unit;
    Tensor flat, incoming;
    std::shared_ptr<Work> work;
  };

  // Construction (fsdp.cpp).
  void find_units(const FSDPOptions& options);
  void build_unit(size_t u, const std::vector<size_t>& param_ids);
  void install_hooks();
  // Gathering and releasing (fsdp.cpp).
  void gather(size_t u, bool wait = true);
  void release(size_t u);
  void point_params(size_t u, const Tensor& flat);  // unit u's parameters as views of `flat`
  void before_unit(size_t u);
  void after_unit(size_t u, std::vector<Tensor>& outputs);
  void check_same_units(const std::vector<std::vector<size_t>>& ids) const;
  // Backward (fsdp_backward.cpp).
  void pre_backward(size_t u);
  void on_grad(size_t u);
  void reduce(size_t u);
  void finish_reductions();
  void end_of_backward();
  void ensure_end_of_backward_queued();

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  bool prefetch_ = true;
  std::optional<DType> param_dtype_;
  std::function<void(size_t, const std::vector<Tensor>&)> before_reduce_;  // FSDPOptions'
  std::vector<Tensor> params_;
  std::vector<size_t> unit_of_;  // parameter -> unit
  std::vector<Unit> units_;      // units_[0] is the root
  std::vector<Bucket> layout_;   // per unit: params, offsets, numel (padded), shard (gradient)
  std::vector<size_t> order_, last_order_;  // units in the order their forwards ran
  std::vector<Reduction> reductions_;
  bool pinned_ = false;  // a FullParams guard lives: nothing is released
  // forward and loss: the root gathered around fn(x), x cast under mixed precision.
  Tensor run_root(const Tensor& x, const std::function<Tensor(const Tensor&)>& fn);
  bool root_in_backward_ = false;  // a training forward ran; its backward reduces the root
  bool root_held_ = false;         // hold_root: the caller releases it (a pipeline stage)
  bool end_queued_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // read by hooks that outlive this
  std::function<void()> on_shards_ready_;
};

}  // namespace loom::distributed
