// DataParallel: how an example program spreads its model over the processes, as --zero asks:
// the model alone (one process, --zero 0), DistributedDataParallel (--zero 0 under loomrun), or
// DDP with ZeRO stage 1 or 2 and a ZeroOptimizer over the program's optimizer, or
// FullyShardedDataParallel (stage 3) and a ZeroOptimizer (any number of processes, one included).
// And MemoryProbe, the per-rank memory report after the first step. Leaves out: the step itself
// (train/step_runner.h).
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

// Note [Memory report]
// Made before the first step, it notes the bytes the allocator of the run's device holds
// (weights, data, everything resident) and resets the peak; report() after the first step
// prints, from rank 0, one line per rank: parameters, gradients and optimizer state (the
// tensors' sizes; under ZeRO the rank's shards), activations and temporaries (the step's peak
// less what was resident before it, the gradients and the state: what the step added and freed
// again), and the peak. CPU: the CPU allocator's counters (glibc's usable sizes); CUDA: the
// caching allocator's (allocated bytes, not the reserved cache).
class MemoryProbe {
 public:
  explicit MemoryProbe(Device device);
  // A collective: every rank calls it once, after its first step.
  void report(const RunSetup& run, nn::Module& model, DataParallel& dp) const;

 private:
  Device device_;
  int64_t resident_ = 0;
};

}  // namespace loom::train
