// DistributedDataParallel: wraps a model so that every rank of a process group trains the same
// weights on its own share of each batch: the same start (rank 0's parameters and buffers), the
// mean gradient over ranks after every backward (distributed/ddp/reducer.h), rank 0's buffers at
// every forward; the step capturable into a CUDA graph over NCCL. Leaves out: sharded parameters
// or optimizer state (ZeRO/FSDP) and SyncBatchNorm.
#pragma once

#include <functional>
#include <memory>

#include "distributed/ddp/reducer.h"
#include "distributed/process_group/process_group.h"
#include "nn/module.h"

namespace loom::distributed {

struct DDPOptions {
  // The gradient side, handed to the Reducer as it is (distributed/ddp/reducer.h): bucket caps
  // (first_bucket_cap_bytes 1 MiB, bucket_cap_bytes 25 MiB), find_unused_parameters (Note
  // [Unfinished reduction] in reducer.cpp), rebuild_buckets (once, in the order gradients
  // arrived), comm_dtype (kBF16 or kF16: communicate gradients rounded).
  //   DDPOptions o;  o.reducer.find_unused_parameters = true;  o.reducer.comm_dtype = kBF16;
  ReducerOptions reducer;
  bool broadcast_buffers = true;  // rank 0's buffers (BatchNorm statistics) every forward
  // Every N training forwards, hash the parameters on every rank and fail if they differ
  // (0 = never). Costs a copy of the weights to the host and one all-gather per check.
  int64_t check_consistency_every = 0;
};

// Note [DDP as a module]
// DistributedDataParallel is an nn::Module whose parameters, buffers and children are the wrapped
// module's, under the same names: state_dict() of the wrapper equals state_dict() of the model,
// so a checkpoint saved with DDP loads without it and the other way round. Construct it after the
// model is on its device (model->to(dev)): the gradient hooks and buckets hold the parameters of
// that moment (Note [Modules hold their tensors by pointer]). Every rank must construct it, in
// the same order, as with any collective.
class DistributedDataParallel : public nn::Module {
 public:
  // pg null: the world group (init_process_group, distributed/world.h). Checks that every rank has
  // the same parameter and buffer names, dtypes and shapes, then broadcasts them from rank 0.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                   std::shared_ptr<ProcessGroup> pg = nullptr,
                                   DDPOptions options = {});

  // Training forward (train mode, grad enabled): buffers from rank 0, the previous reduction
  // checked, .grad bound to the buckets; the backward of its output all-reduces the gradients.
  Tensor forward(const Tensor& x) override;
  // The wrapped module's own loss (nn::Module::has_loss), with the same training forward around
  // it: the backward of the loss all-reduces the gradients.
  bool has_loss() const override { return module_->has_loss(); }
  Tensor loss(const Tensor& x, const Tensor& y) override;
  void train(bool on = true) override;

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& process_group() { return *pg_; }
  Reducer& reducer() { return *reducer_; }
  const DDPOptions& options() const { return opt_; }

  // Gradient accumulation: forwards inside the scope do not synchronise their backward, which
  // only adds into .grad; the first backward of a forward outside reduces the accumulated sum.
  //   { auto guard = ddp.no_sync(); for (micro-batch but last) loss(ddp(x)).backward(); }
  //   loss(ddp(last)).backward();   // all-reduces the sum of all micro-batches' gradients
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), prev_(d.sync_) { d.sync_ = false; }
    ~NoSync() { d_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Uneven inputs (Note [Join]): runs `body` (this rank's training loop, one forward and one
  // backward per step); when it returns, this rank keeps taking part in the others' all-reduces
  // with zero gradients until every rank has finished, then all ranks take the parameters and
  // buffers of the rank that ran the most steps. Every rank calls join; no_sync inside is an error.
  void join(const std::function<void()>& body);

  // Hashes the parameters on every rank and fails, naming the first parameter that differs and
  // the ranks that differ from rank 0. A collective: every rank calls it.
  void check_consistency();

  // CUDA graphs (Note [DDP and CUDA graphs] in ddp.cpp). prepare_for_capture: after at least one
  // eager training step and before capturing one (the bucket rebuild happens now); an error with
  // the reason for what cannot be captured (Gloo, find_unused_parameters, ZeRO, join).
  // before_replay: before each replay of a captured step holding `forwards` training forwards;
  // counts them and runs the consistency check when one is due, outside the graph.
  void prepare_for_capture();
  void before_replay(int64_t forwards);

  int64_t iteration() const { return iteration_; }  // training forwards so far

  // Rank 0's buffers to every rank now (what each forward does with broadcast_buffers), one
  // broadcast per dtype. A collective. The examples call it before evaluating.
  void sync_buffers();

 private:
  void verify_same_layout();
  void broadcast_state(int root);
  bool capturing(const Tensor& x) const;
  // forward and loss: DDP's work around `body` (the wrapped module's forward or loss of x).
  Tensor run_training_forward(
      const Tensor& x,
      const std::function<Tensor()>& body);  // x's device's current stream is being captured

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DDPOptions opt_;
  std::shared_ptr<Reducer> reducer_;
  bool sync_ = true;
  bool join_active_ = false;
  int64_t iteration_ = 0;
};

// Rank `0`'s buffers of `module` (BatchNorm statistics) to every rank of pg, one broadcast per
// dtype (a collective). DistributedDataParallel::sync_buffers and FSDP's use it.
void broadcast_buffers(nn::Module& module, ProcessGroup& pg);

}  // namespace loom::distributed
