// Run: the bookkeeping around a program's training step, the same for every program: intervals
// (epochs, or --eval-every steps), the batches, the loss window and its read-backs, TensorBoard,
// checkpoints and resume, signals, --max-steps, the memory report after the first step, the
// profile and the final line. The program keeps its step and its evaluation in main and reads
//   while (run.next_interval()) {
//     while (auto batch = run.next_batch())
//       if (!run.after_step(step(batch->data, batch->target))) break;
//     if (!run.end_interval() || !run.evaluated(evaluate(...))) break;
//   }
//   return run.finish();
// Leaves out: the step (the program's: forward, loss, backward, clip, update) and what is
// evaluated on which data.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "autograd/anomaly.h"
#include "data/dataloader.h"
#include "distributed/parallel/parallel_model.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/lr_scheduler.h"
#include "train/checkpointing.h"
#include "train/evaluate.h"
#include "train/loss_window.h"
#include "train/memory_probe.h"
#include "train/micro_batches.h"
#include "train/progress.h"
#include "train/run_log.h"
#include "train/step_profile.h"

namespace loom::train {

// The parts of the program a run saves, restores and reports on; the program owns each.
struct RunParts {
  distributed::ParallelModel& model;  // as parallelize spread it; its optimizer() steps
  data::DataLoader& loader;           // the training batches
  amp::GradScaler& scaler;            // saved with --amp fp16, reported in the epoch's summary
  optim::LRScheduler* scheduler = nullptr;  // saved and resumed when there is one
};

// How the run is cut and reported.
struct RunPlan {
  std::string title;           // "GPT 4x128 (818944 parameters)", for the opening line
  int64_t train_examples = 0;  // the training set's size, in `unit`
  // What train_examples and samples_per_step count: "examples", or "tokens" (a language model:
  // the opening line says tokens and the progress lines tok/s).
  const char* unit = "examples";
  // 0: an interval is an epoch (a classifier: evaluate at each epoch's end); N: an interval is N
  // steps over --max-steps (or the epochs' batches) in all (a language model's validation).
  int64_t eval_every = 0;
  int64_t samples_per_step = 0;  // tokens (or examples) a step takes, all ranks (0: --batch-size)
  double flops_per_step = 0;     // for the MFU column of an interval's line (0: none)
  double peak_tflops = 0;        // the device's peak, for MFU
  // Set ("masked-token accuracy"): each validation line is followed by "  val <name> A" and the
  // scalar val/accuracy, and the final line names it. Empty: no accuracy at each validation, and
  // the final line's "next-token accuracy".
  std::string accuracy_name{};

  bool counts_tokens() const { return std::string(unit) == "tokens"; }
};

// The steps a run takes in all: --max-steps, else --epochs times the loader's batches.
int64_t total_steps(const TrainConfig& cfg, const data::DataLoader& loader);

class Run {
 public:
  // Resumes from the newest checkpoint with --resume (every rank), prints the opening line,
  // installs the signal handlers and, with --profile, the step timer. Construct it after the
  // scheduler and after parallelize, before the first step.
  Run(TrainConfig& cfg, const RunSetup& setup, RunParts parts, RunPlan plan);

  // Starts the next interval (its progress display); false when the run is over.
  bool next_interval();
  // The interval's next batch; none at its end (an epoch's end, or --eval-every steps done).
  std::optional<data::Batch> next_batch();
  // After a step with its loss (a device scalar): counts it, reports memory after the first,
  // feeds the loss window (log, divergence), saves when --checkpoint-every is due. False when
  // the interval must stop early (a signal, --max-steps).
  bool after_step(const Tensor& loss);
  // Ends the interval's display; false (after saving exactly this step) when a signal stops the
  // run or --max-steps is reached before an evaluation.
  bool end_interval();
  // Reports the interval's evaluation (summary line, TensorBoard) and saves; false when a signal
  // arrived during the evaluation (then this checkpoint is the last).
  bool evaluated(const Evaluation& eval);
  // The last evaluation evaluated() was given (zeros before the first).
  const Evaluation& last_evaluation() const { return last_eval_; }
  // Prints the profile and the final line; returns the program's exit status.
  int finish();

  // How the step accumulates: --grad-accum micro-batches, the model's no_sync, --profile's marks.
  Accumulation accumulation() const;
  int64_t step() const { return step_; }
  RunLog& log() { return log_; }

 private:
  bool interval_done() const;
  void report_validation(const Evaluation& eval);
  ProgressOptions progress_options() const;  // the setup's, with the plan's rate unit

  TrainConfig& cfg_;
  const RunSetup& setup_;
  RunParts parts_;
  RunPlan plan_;
  Checkpointer ckpt_;
  int64_t step_ = 0, total_ = 0, epoch_ = 0, in_interval_ = 0, interval_steps_ = 0;
  RunLog log_;
  LossWindow window_;
  std::optional<autograd::DetectAnomalyGuard> anomaly_;
  std::unique_ptr<StepProfiler> profiler_;
  std::optional<MemoryProbe> memory_;  // until the first step's report
  std::optional<EpochProgress> progress_;
  Evaluation last_eval_{};
};

}  // namespace loom::train
