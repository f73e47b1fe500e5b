// Checkpoints of a training run: resuming from the newest valid one (checked against the run
// before anything is loaded) and saving the run at a position (model, optimizer, GradScaler,
// learning-rate schedule, RNG, epoch, sample position, step), from rank 0 while the other ranks
// wait. Any model: the positions are counted in samples of the training loader. Leaves out: the
// file format and rotation (nn/checkpoint.h) and when to save (the program's loop decides).
#pragma once

#include <optional>
#include <string>

#include "data/dataloader.h"
#include "distributed/parallel/parallel_model.h"
#include "nn/amp/grad_scaler.h"
#include "nn/checkpoint.h"
#include "nn/module.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/optimizer.h"
#include "train/run_setup.h"

namespace loom::train {

// Checks what a checkpoint holds against this run before anything is loaded: the counters are in
// range, the sampler position lies inside an epoch of `epoch_size` examples, and every model
// tensor has the model's dtype (load_state_dict would cast silently). Errors name the file
// ("checkpoint 'ckpt/step-8.ckpt': epoch 5 is beyond this run's --epochs 2").
void check_resume_state(const TrainingState& st, const nn::StateDict& model_sd,
                        int64_t steps_per_epoch, int64_t epoch_size, const TrainConfig& cfg);

// What a run saves and restores; the program owns each part and outlives this.
// The model and its optimizer are saved in the whole model's layout, whatever parallelize made of
// them (Note [Whole-layout checkpoints]): a run resumes at another world size, ZeRO stage or tp.
struct RunState {
  distributed::ParallelModel& model;        // with its optimizer
  amp::GradScaler& scaler;                  // saved and restored only when enabled (--amp fp16)
  data::DataLoader& loader;                 // the training loader: its epoch and position
  optim::LRScheduler* scheduler = nullptr;  // when set, resumed at its saved step
};

class Checkpointer {
 public:
  Checkpointer(const TrainConfig& cfg, const RunSetup& run, RunState state);

  // With --resume: loads the newest valid checkpoint in --checkpoint-dir (every rank reads the
  // file), checks it, restores model, optimizer, scaler, the default generator and the loader's
  // epoch and position, prints where it resumed (rank 0) and returns the step it had reached.
  // Returns 0 without --resume, or when the folder holds no checkpoint yet (and says so). Errors:
  // checkpoints that are all invalid, one that does not fit the run, another global batch, a
  // position the processes cannot split.
  int64_t resume();

  // Saves at `step`, `epoch` with `global_position` samples of it done (rank 0, after a sharded
  // optimizer's state was gathered from every rank into the unsharded layout; all ranks then
  // wait at a barrier so that nobody reads or overwrites it before it is complete); returns the
  // file ("" without --checkpoint-dir, and on ranks > 0).
  std::string save(int64_t epoch, int64_t global_position, int64_t step);
  // Saves where the training loader stands now (mid-epoch: its position times the world size).
  std::string save_here(int64_t step);

  // --checkpoint-every asks for a save after this step (and the epoch is not over).
  bool due(int64_t step) const;

 private:
  const TrainConfig& cfg_;
  const RunSetup& run_;
  RunState s_;
};

}  // namespace loom::train
