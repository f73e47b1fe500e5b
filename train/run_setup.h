// RunSetup: everything a training run settles before its first step, whatever the model: the
// device (one GPU per process under loomrun), the process group (made here unless the program
// made one, destroyed at the end), the checks of flags that do not fit together and of folders
// that cannot be written (so they are errors before training, not after an epoch), the
// per-process batch, and the seed. Leaves out: data (train/classifier_data.h), resuming
// (train/checkpointing.h) and the DistributedDataParallel wrapper (the program makes it).
#pragma once

#include <memory>
#include <string>

#include "core/device.h"
#include "distributed/env.h"
#include "distributed/parallel/parallelize.h"
#include "distributed/process_group/process_group.h"
#include "train/progress.h"
#include "train/train_config.h"

namespace loom::train {

// The device for --device `spec`: empty or "cuda" picks cuda:LOCAL_RANK (mod the GPUs present)
// when there is a GPU, else the CPU; an explicit cuda:N is checked against this build and
// machine ("--device cuda:9: this machine has 2 CUDA device(s), cuda:0 to cuda:1").
Device pick_device(const std::string& spec, const distributed::JobEnv& env);

// Creates `dir` if needed and checks that a file can be written in it; the error names `flag`.
void check_writable_dir(const char* flag, const std::string& dir);

// Makes the world process group unless one exists (NCCL for a CUDA device, Gloo for the CPU; a
// world of one without a launcher) and destroys the one it made when it goes.
class ProcessGroupScope {
 public:
  explicit ProcessGroupScope(Device device);
  ~ProcessGroupScope();
  ProcessGroupScope(const ProcessGroupScope&) = delete;
  ProcessGroupScope& operator=(const ProcessGroupScope&) = delete;

 private:
  bool own_ = false;
};

class RunSetup {
 public:
  // Picks the device, joins the process group, runs the checks above (errors name the flags),
  // seeds the default generator with --seed and sets --recompute-activations' switch.
  explicit RunSetup(const TrainConfig& cfg);

  bool main() const { return rank == 0; }  // rank 0 prints, logs and writes checkpoints
  // Progress display for this rank: nothing printed on ranks > 0, plain lines with N processes
  // (every rank then reads the loss back at the same steps: Note [Loss read-back]).
  ProgressOptions progress_options() const;

  const double start_seconds;  // steady_seconds() when the run began
  const distributed::JobEnv env;
  const Device device;

 private:
  ProcessGroupScope group_;  // before pg: made first, destroyed last

 public:
  const std::shared_ptr<distributed::ProcessGroup> pg;
  const int rank, world;
  const int64_t local_batch;  // --batch-size / replicas
  // The data-parallel replicas, which read different data, and this process's: the world and the
  // rank, or under --tp / --pp the mesh's dp size and coordinate (the tp ranks and pipeline
  // stages of a replica read alike).
  const int replicas, replica;
};

// The plan of the run's flags for distributed::parallelize: --zero, --tp, and under --zero 3 with
// --amp bf16 the units gathered in bf16 (Note [FSDP mixed precision]).
distributed::ParallelPlan parallel_plan(const TrainConfig& cfg);

}  // namespace loom::train
