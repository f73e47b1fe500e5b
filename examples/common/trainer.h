// The training loop the example programs share: Fashion-MNIST in, a trained classifier out, with
// evaluation, progress, TensorBoard logs, checkpoints and exact resume. Each example defines its
// model and flags and calls train_classifier().
// Under loomrun (WORLD_SIZE > 1) it trains data-parallel, one process per GPU or CPU process.
// Leaves out: evaluation under autocast (the test set is evaluated in float32).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "data/transforms.h"
#include "nn/module.h"

namespace loom::examples {

struct TrainConfig {
  std::string device;  // cpu, cuda, cuda:N; empty = cuda if present
  int64_t epochs = 10;
  int64_t batch_size = 128;  // global: each of N processes takes batch_size / N
  double lr = 1e-3;
  std::string optimizer = "adam";  // sgd (momentum 0.9), adam, adamw
  double weight_decay = 0.0;
  double label_smoothing = 0.0;
  uint64_t seed = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t workers = 2;
  std::string log_dir;         // TensorBoard event files; empty = none
  std::string checkpoint_dir;  // empty = no checkpoints
  int keep_last = 3;
  bool resume = false;      // continue from the newest valid checkpoint in checkpoint_dir
  bool cuda_graph = false;  // capture the whole fixed-shape step once, replay it
  int64_t train_limit = 0;  // use only the first N training images (0 = all)
  int64_t max_steps = 0;    // stop after this many steps in total (0 = no limit)
  int64_t log_every = 20;   // read the loss back from the device every N steps
  bool allow_nonfinite =
      false;  // keep going when the loss is nan/inf (default: stop with an error)
  int64_t checkpoint_every = 0;  // also save every N steps, mid-epoch (0 = per epoch only)
  bool profile = false;          // print this process's step-time breakdown at the end
  std::string amp = "off";       // off, bf16 (autocast), fp16 (autocast + GradScaler)
  bool detect_anomaly = false;   // the first NaN/Inf in forward or backward is an error
};

// Adds the common flags (--device, --epochs, ...) to a CLI11 app, each checked with a readable
// range (train/flags.h); sets the app up so that --help shows defaults. Call it before
// adding the program's own options.
void add_train_flags(CLI::App& app, TrainConfig& cfg);

struct TrainReport {
  double train_loss = 0;  // mean over the last epoch
  double test_loss = 0;
  double test_accuracy = 0;  // fraction in [0, 1]
  double seconds = 0;        // whole run
  int64_t steps = 0;
  bool evaluated = false;        // an epoch ended and the test set was evaluated (test_* are set)
  int rank = 0, world_size = 1;  // this process's place in the job (print only on rank 0)
  // SIGTERM or SIGINT that stopped the run early (Note [Preemption] in trainer.cpp); 0 when none.
  int stop_signal = 0;
  std::string stop_checkpoint;  // the checkpoint written when it stopped ("" without one)
};

// Trains `model` on Fashion-MNIST as configured, prints progress and a summary per epoch (rank 0);
// see Note [Data-parallel training loop] in trainer.cpp for what changes with N processes.
// Errors (before the first step when they can be known then): no full batch to train on, a
// --resume folder that does not exist, an unwritable --checkpoint-dir or --log-dir, a checkpoint
// that does not fit the run, a non-finite loss (unless allow_nonfinite), a failed checkpoint write.
TrainReport train_classifier(const std::shared_ptr<nn::Module>& model, const TrainConfig& cfg,
                             std::shared_ptr<const data::Transform> train_transform = nullptr);

// "final test accuracy ..." when an evaluation ran, else a line saying none did.
void print_final(const TrainReport& r);  // prints on rank 0 only

// The program's exit status for a finished run: 0, or 128 + the signal when a SIGTERM or SIGINT
// stopped it early after saving (143 or 130, what a shell reports for a process the signal
// killed, so that a job script sees the run is not complete; the checkpoint is there to resume).
int exit_status(const TrainReport& r);

// Runs main_body, turning loom::Error and any std::exception into one line on stderr
// ("<program>: error: ...") and exit code 1.
int run_main(const char* program, const std::function<int()>& main_body);

}  // namespace loom::examples
