// Sharded training and evaluation loaders: see train/sharded_loaders.h.
#include "train/sharded_loaders.h"

#include "data/sampler.h"

namespace loom::train {

std::unique_ptr<data::DataLoader> sharded_train_loader(
    std::shared_ptr<const data::Dataset> set, const TrainConfig& cfg, const RunSetup& run,
    std::shared_ptr<const data::Transform> transform) {
  auto sampler = std::make_shared<data::DistributedSampler>(
      set->size(), data::DistributedSamplerOptions{.num_replicas = run.replicas,
                                                   .rank = run.replica,
                                                   .shuffle = true,
                                                   .seed = cfg.seed,
                                                   .drop_last = true});
  return std::make_unique<data::DataLoader>(
      std::move(set), sampler,
      data::DataLoaderOptions{.batch_size = run.local_batch,
                              .drop_last = true,
                              .num_workers = cfg.workers,
                              .device = run.device,
                              .seed = cfg.seed,
                              .transform = std::move(transform)});
}

std::unique_ptr<data::DataLoader> sharded_eval_loader(std::shared_ptr<const data::Dataset> set,
                                                      int64_t n, int64_t batch, int64_t workers,
                                                      const RunSetup& run) {
  auto sampler = std::make_shared<data::DistributedSampler>(
      n, data::DistributedSamplerOptions{.num_replicas = run.replicas,
                                         .rank = run.replica,
                                         .shuffle = false,
                                         .exactly_once = true});
  return std::make_unique<data::DataLoader>(
      std::move(set), sampler,
      data::DataLoaderOptions{.batch_size = batch, .num_workers = workers, .device = run.device});
}

}  // namespace loom::train
