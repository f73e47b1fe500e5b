// The loaders of a run sharded over the job's processes, for any dataset: the training loader
// (a shuffled DistributedSampler, drop_last, --batch-size / N rows per process, batches on the
// run's device) and an evaluation loader (every example on exactly one rank, Note [Sharded
// evaluation] in train/evaluate.h). Used by ClassifierData and TokenData. Leaves out: which
// dataset (the caller's) and its checks.
#pragma once

#include <memory>

#include "data/dataloader.h"
#include "data/transforms.h"
#include "train/run_setup.h"

namespace loom::train {

// Rank r takes the positions = r mod N of each global batch (Note [Data-parallel training loop]
// in train/classifier_data.h), reshuffled each epoch from --seed.
std::unique_ptr<data::DataLoader> sharded_train_loader(
    std::shared_ptr<const data::Dataset> set, const TrainConfig& cfg, const RunSetup& run,
    std::shared_ptr<const data::Transform> transform = nullptr);

// The first `n` examples of `set` in order, each on exactly one rank (no padding), in batches of
// `batch` rows with `workers` loading threads.
std::unique_ptr<data::DataLoader> sharded_eval_loader(std::shared_ptr<const data::Dataset> set,
                                                      int64_t n, int64_t batch, int64_t workers,
                                                      const RunSetup& run);

}  // namespace loom::train
