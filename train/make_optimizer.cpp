// The optimizer factory of training runs. See make_optimizer.h.
#include "train/make_optimizer.h"

#include "core/error.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"

namespace loom::train {

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = c.lr, .momentum = 0.9, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  LOOM_CHECK(c.optimizer == "adam", "--optimizer ", c.optimizer, ": expected sgd, adam or adamw");
  return std::make_unique<optim::Adam>(
      params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

std::unique_ptr<optim::Optimizer> make_transformer_adamw(const TrainConfig& c,
                                                         const std::vector<Tensor>& params,
                                                         double beta2) {
  LOOM_CHECK(c.optimizer == "adamw", "--optimizer ", c.optimizer,
             ": a transformer here trains with adamw (weight decay on its matrices only)");
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamWOptions o{.lr = c.lr, .betas = {0.9, beta2}, .weight_decay = c.weight_decay};
  auto opt = std::make_unique<optim::AdamW>(decay, o);
  o.weight_decay = 0.0;
  if (!no_decay.empty()) opt->add_param_group(no_decay, o);
  return opt;
}

}  // namespace loom::train
