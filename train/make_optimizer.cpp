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

}  // namespace loom::train
