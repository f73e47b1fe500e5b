// The data-parallel kinds of ParallelModel: DDPModel (every rank holds the whole model; DDP
// all-reduces the gradients; with ZeRO-1/2 a ZeroOptimizer shards the optimizer state and the
// gradients) and FSDPModel (ZeRO-3: the parameters sharded too). Both work over any process
// group: the world, or the data-parallel dimension of a mesh under tensor parallelism. Leaves out:
// the machinery itself (distributed/ddp, zero, fsdp) and choosing between them (parallelize.h).
#pragma once

#include <memory>

#include "distributed/ddp/ddp.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/parallel/parallel_model.h"
#include "distributed/zero/zero_optimizer.h"

namespace loom::distributed {

class DDPModel : public ParallelModel {
 public:
  // `zero_stage` 0: DDP and the program's optimizer; 1 or 2: DDP in ZeRO's mode and a
  // ZeroOptimizer over `opt` (distributed/zero/zero_optimizer.h). Every rank of pg constructs it,
  // after the model is on its device; rank 0's weights are broadcast.
  DDPModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> opt,
           std::shared_ptr<ProcessGroup> pg, int zero_stage, DDPOptions options = {});
  // Over a DDP the caller made and keeps, with its optimizer (the tests' and benchmarks' way).
  DDPModel(std::shared_ptr<DistributedDataParallel> ddp, optim::Optimizer& opt);

  nn::Module& train_module() override { return *ddp_; }
  nn::Module& eval_module() override { return ddp_->module(); }
  optim::Optimizer& optimizer() override;
  const optim::Optimizer& plain_optimizer() override { return *opt_; }
  std::string describe() const override;
  std::unique_ptr<Pause> no_sync() override;
  void sync_buffers() override { ddp_->sync_buffers(); }
  void on_backward_computed(std::function<void()> f) override;

  nn::StateDict model_state_dict() override { return ddp_->module().state_dict(); }
  void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) override;

  void check_capturable(const char* what) const override;
  void prepare_for_capture() override { ddp_->prepare_for_capture(); }
  void before_replay(int64_t forwards) override { ddp_->before_replay(forwards); }
  void after_replay() override { ddp_->process_group().watch_graph_replay(); }
  Memory memory() const override;

  DistributedDataParallel& ddp() { return *ddp_; }

 private:
  std::unique_ptr<optim::Optimizer> owned_opt_;
  optim::Optimizer* opt_;
  std::shared_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<ZeroOptimizer> zero_;
};

class FSDPModel : public ParallelModel {
 public:
  // Every rank of pg constructs it, after the model is on its device; `opt` (over the model's
  // parameters) becomes the template of a ZeroOptimizer over the shards.
  FSDPModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> opt,
            std::shared_ptr<ProcessGroup> pg, FSDPOptions options = {});

  nn::Module& train_module() override { return *fsdp_; }
  bool eval_forwards_are_collectives() const override { return true; }
  optim::Optimizer& optimizer() override { return *zero_; }
  const optim::Optimizer& plain_optimizer() override { return *full_opt_; }
  std::string describe() const override;
  void sync_buffers() override { fsdp_->sync_buffers(); }
  void check_capturable(const char* what) const override;

  nn::StateDict model_state_dict() override;
  void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) override;
  void with_whole_model(const std::function<void()>& f) override;
  Memory memory() const override;

 private:
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> full_opt_;
  std::shared_ptr<FullyShardedDataParallel> fsdp_;
  std::unique_ptr<ZeroOptimizer> zero_;
};

}  // namespace loom::distributed
