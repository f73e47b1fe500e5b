// The optimizer a run's --optimizer, --lr and --weight-decay name: sgd (momentum 0.9), adam or
// adamw; and AdamW as transformers are trained (two parameter groups). Leaves out:
// learning-rate schedules (nn/optim/lr_scheduler.h).
#pragma once

#include <memory>
#include <vector>

#include "nn/optim/optimizer.h"
#include "train/train_config.h"

namespace loom::train {

// Errors: an --optimizer other than sgd, adam or adamw (the flag's check refuses it first).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& cfg,
                                                 std::vector<Tensor> params);

// AdamW as GPT-2 is trained (nanoGPT, llm.c): betas (0.9, beta2), --lr, and --weight-decay on the
// matrices only (parameters of 2 or more dims: Linear weights, embeddings) in group 0; biases and
// LayerNorm weights in group 1 without decay. Errors: --optimizer other than adamw.
std::unique_ptr<optim::Optimizer> make_transformer_adamw(const TrainConfig& cfg,
                                                         const std::vector<Tensor>& params,
                                                         double beta2 = 0.95);

}  // namespace loom::train
