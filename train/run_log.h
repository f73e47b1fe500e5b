// RunLog: what a training run tells its user, from rank 0: the opening line, TensorBoard scalars
// (Note [Log write failures]), the end-of-epoch summary, a stop by signal or --max-steps, the
// profile and the final line; and the run's outcome (TrainReport), which gives the program's exit
// status. Also run_main, the error boundary of a program's main. Any model: it prints numbers it
// is given. Leaves out: the per-step progress display (train/progress.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "nn/amp/grad_scaler.h"
#include "train/evaluate.h"
#include "train/progress.h"
#include "train/run_setup.h"
#include "train/step_profile.h"
#include "train/tensorboard.h"

namespace loom::train {

struct TrainReport {
  double train_loss = 0;  // mean over the last epoch
  double test_loss = 0;
  double test_accuracy = 0;  // fraction in [0, 1]
  double seconds = 0;        // whole run
  int64_t steps = 0;
  bool evaluated = false;   // an epoch ended and the test set was evaluated (test_* are set)
  bool validation = false;  // test_* are a language model's validation loss and token accuracy
  // SIGTERM or SIGINT that stopped the run early (Note [Preemption] in train/loss_window.h); 0
  // when none.
  int stop_signal = 0;
  std::string stop_checkpoint;  // the checkpoint written when it stopped ("" without one)
};

// The program's exit status for a finished run: 0, or 128 + the signal when a SIGTERM or SIGINT
// stopped it early after saving (143 or 130, what a shell reports for a process the signal
// killed, so that a job script sees the run is not complete; the checkpoint is there to resume).
int exit_status(const TrainReport& r);

// Runs main_body, turning loom::Error and any std::exception into one line on stderr
// ("<program>: error: ...") and exit code 1. Running out of memory is such an error
// (loom::OutOfMemoryError, Note [Out of memory] in core/out_of_memory.cpp): its line says what
// to try, and nothing is saved on the way out (a checkpoint written earlier stays as it was).
int run_main(const char* program, const std::function<int()>& main_body);

class RunLog {
 public:
  // Opens a TensorBoard writer in --log-dir on rank 0 (none without the flag).
  RunLog(const TrainConfig& cfg, const RunSetup& run);

  // "training Sequential on cpu: 60000 examples, batch 128, adam lr 0.001" (with the processes,
  // the per-process batch and the AMP mode when they apply).
  void start(const std::string& model_name, int64_t train_examples, const char* unit = "examples");
  // One TensorBoard point (rank 0). Note [Log write failures]: a write that fails (a full disk)
  // is reported once and logging stops, while training goes on.
  void scalar(const std::string& tag, double value, int64_t step);
  // The epoch's summary line (and the fp16 loss scale), its TensorBoard scalars, and the report's
  // losses; `progress` is the finished epoch's display, `lr` the optimizer's.
  void end_epoch(int64_t epoch, const EpochProgress& progress, const Evaluation& eval, double lr,
                 const amp::GradScaler& scaler, int64_t step);
  // "got SIGTERM: stopped after step 12 and saved ckpt/...; run again with --resume ...".
  void stopped(int sig, const std::string& when, const std::string& checkpoint);
  void stopped_at_max_steps(int64_t step);  // "stopped after 21 steps (--max-steps)"
  // A language model's validation (train_gpt): the final line reports its loss and accuracy.
  void validated(const Evaluation& eval);
  // What the final line calls the validation accuracy ("next-token accuracy" by default;
  // train_bert's "masked-token accuracy", "accuracy").
  void set_accuracy_name(std::string name) { accuracy_name_ = std::move(name); }
  // Prints the profile (every rank) and the final line (rank 0, unless a signal stopped the run);
  // returns the exit status.
  int finish(int64_t steps, const StepProfiler* profiler);

  const TrainReport& report() const { return report_; }

 private:
  const TrainConfig& cfg_;
  const RunSetup& run_;
  std::unique_ptr<SummaryWriter> tb_;
  TrainReport report_;
  std::string accuracy_name_ = "next-token accuracy";
};

}  // namespace loom::train
