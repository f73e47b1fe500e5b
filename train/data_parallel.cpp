// DataParallel: see train/data_parallel.h.
#include "train/data_parallel.h"

namespace loom::train {

DataParallel::DataParallel(const TrainConfig& cfg, const RunSetup& run,
                           std::shared_ptr<nn::Module> model, optim::Optimizer& opt)
    : model_(std::move(model)), opt_(opt) {
  if (run.world == 1 && cfg.zero == 0) return;  // one process: nothing to spread
  if (cfg.zero == 3) {                          // Note [FSDP] in distributed/fsdp/fsdp.h
    distributed::FSDPOptions o;  // --amp bf16: units gathered in bf16 over fp32 shards
    if (cfg.amp == "bf16") o.param_dtype = kBF16;  // Note [FSDP mixed precision]
    fsdp_ = std::make_shared<distributed::FullyShardedDataParallel>(model_, run.pg, o);
    zero_ = std::make_unique<distributed::ZeroOptimizer>(*fsdp_, opt_);
    return;
  }
  ddp_ = std::make_shared<distributed::DistributedDataParallel>(
      model_, run.pg, distributed::ddp_options_for_zero(cfg.zero));
  if (cfg.zero > 0) zero_ = std::make_unique<distributed::ZeroOptimizer>(*ddp_, opt_);
}

}  // namespace loom::train
