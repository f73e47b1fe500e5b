// The optimizer a run's --optimizer, --lr and --weight-decay name: sgd (momentum 0.9), adam or
// adamw. Leaves out: learning-rate schedules and parameter groups.
#pragma once

#include <memory>
#include <vector>

#include "nn/optim/optimizer.h"
#include "train/train_config.h"

namespace loom::train {

// Errors: an --optimizer other than sgd, adam or adamw (the flag's check refuses it first).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& cfg,
                                                 std::vector<Tensor> params);

}  // namespace loom::train
