// Fashion-MNIST loaders for one rank of a classifier run. See classifier_data.h.
#include "train/classifier_data.h"

#include "core/error.h"
#include "data/mnist.h"
#include "train/sharded_loaders.h"

namespace loom::train {

ClassifierData::ClassifierData(const TrainConfig& cfg, const RunSetup& run,
                               std::shared_ptr<const data::Transform> train_transform) {
  auto train_mnist = std::make_shared<data::FashionMNIST>(cfg.data_dir, true);
  test_set = std::make_shared<data::FashionMNIST>(cfg.data_dir, false);
  train_set = train_mnist;
  if (cfg.train_limit > 0 && cfg.train_limit < train_mnist->size()) {
    auto all = train_mnist->to_tensor_dataset();
    train_set = std::make_shared<data::TensorDataset>(all.data().slice(0, 0, cfg.train_limit),
                                                      all.target().slice(0, 0, cfg.train_limit));
  }
  train = sharded_train_loader(train_set, cfg, run, train_transform);
  // Note [Sharded evaluation]: no padding, so every test image is counted once over all ranks.
  test = sharded_eval_loader(test_set, test_set->size(), 1000, cfg.workers, run);
  LOOM_CHECK(train->size() > 0, "no training step: ", train_set->size(),
             " training examples make no full batch of ", "--batch-size ", cfg.batch_size,
             run.world > 1 ? str(" over ", run.world, " processes") : std::string(),
             " (the last partial batch is dropped); lower --batch-size",
             cfg.train_limit > 0 ? " or raise --train-limit" : "");
  LOOM_CHECK(test_set->size() > 0, "no test examples in ", cfg.data_dir);
}

}  // namespace loom::train
