// ClassifierData: Fashion-MNIST for a classifier run, sharded over the job's processes: the
// training loader (a shuffled DistributedSampler, drop_last, --batch-size / N rows per process,
// batches on the run's device) and the test loader (every test image on exactly one rank, Note
// [Sharded evaluation] in train/evaluate.h). Images are normalised (N, 1, 28, 28) float32,
// labels (N) int64. Leaves out: other datasets (a GPT run makes its own token loaders the same
// way) and augmentation (the program passes a transform).
#pragma once

#include <memory>

#include "data/dataloader.h"
#include "data/transforms.h"
#include "train/run_setup.h"

namespace loom::train {

// Note [Data-parallel training loop]
// Under a launcher (WORLD_SIZE > 1) every process trains a replica: its own GPU (cuda:LOCAL_RANK,
// NCCL) or CPU process (Gloo), the model wrapped in DistributedDataParallel. --batch-size is the
// global batch; each process takes batch/N rows of it. The training sampler is a
// DistributedSampler (shuffled with seed + epoch, drop_last): rank r's j-th batch holds the
// samples at positions [j * batch, (j + 1) * batch) of the epoch's permutation that are = r mod N,
// so the union over ranks of step j's batches is exactly step j's batch of a single-process run.
// Checkpoints store the global sample position (batches done x global batch), so a run saved with
// N processes resumes with M (M must divide the global batch) and continues the same batch order
// (train/checkpointing.h). Rank 0 writes checkpoints (then all wait at a barrier), prints and logs
// to TensorBoard; every rank loads the checkpoint onto its own device. Without a launcher it is a
// world of one: no wrapper, no communication.

struct ClassifierData {
  // Reads the idx files in --data-dir; keeps the first --train-limit training images when set.
  // Errors: no full training batch ("no training step: 256 training examples make no full batch
  // of --batch-size 512 ..."), no test images.
  ClassifierData(const TrainConfig& cfg, const RunSetup& run,
                 std::shared_ptr<const data::Transform> train_transform = nullptr);

  std::shared_ptr<const data::Dataset> train_set, test_set;
  std::unique_ptr<data::DataLoader> train, test;
};

}  // namespace loom::train
