// DataParallel: how an example program spreads its model over the processes, as --zero asks:
// the model alone (one process, --zero 0), DistributedDataParallel (--zero 0 under loomrun), or
// DDP with ZeRO stage 1 or 2 and a ZeroOptimizer over the program's optimizer, or
// FullyShardedDataParallel (stage 3) and a ZeroOptimizer (any number of processes, one included).
// Leaves out: the step itself (the program's, or train/step_runner.h) and the memory report
// (train/memory_probe.h).
#pragma once

#include <memory>

#include "distributed/ddp/ddp.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/zero/zero_optimizer.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "train/run_setup.h"

namespace loom::train {

class DataParallel {
 public:
  // Every rank constructs it, after the model is on its device and before the Checkpointer
  // (which must save and restore the sharded optimizer). Broadcasts rank 0's weights (DDP).
  DataParallel(const TrainConfig& cfg, const RunSetup& run, std::shared_ptr<nn::Module> model,
               optim::Optimizer& opt);

  nn::Module& net() {  // what trains
    if (fsdp_) return *fsdp_;
    return ddp_ ? static_cast<nn::Module&>(*ddp_) : *model_;
  }
  // What evaluates: the model itself, or under ZeRO-3 the wrapper (which gathers the root; every
  // rank must then run as many forwards: evaluate_classifier keeps them in step).
  nn::Module& eval_net() { return fsdp_ ? static_cast<nn::Module&>(*fsdp_) : *model_; }
  optim::Optimizer& optimizer() { return zero_ ? *zero_ : opt_; }  // what steps
  // Rank 0's buffers to every rank before evaluating (DDP and FSDP; a collective).
  void sync_buffers() {
    if (ddp_) ddp_->sync_buffers();
    if (fsdp_) fsdp_->sync_buffers();
  }
  // Whether every forward of eval_net() is a collective (ZeRO-3 gathers parameters in it), so that
  // every rank must run as many (Note [Sharded evaluation] in train/evaluate.h).
  bool eval_forwards_are_collectives() const { return fsdp_ != nullptr; }
  distributed::DistributedDataParallel* ddp() const { return ddp_.get(); }
  distributed::FullyShardedDataParallel* fsdp() const { return fsdp_.get(); }
  const distributed::ZeroOptimizer* zero() const { return zero_.get(); }

 private:
  std::shared_ptr<nn::Module> model_;
  optim::Optimizer& opt_;
  std::shared_ptr<distributed::DistributedDataParallel> ddp_;
  std::shared_ptr<distributed::FullyShardedDataParallel> fsdp_;
  std::unique_ptr<distributed::ZeroOptimizer> zero_;
};

}  // namespace loom::train
