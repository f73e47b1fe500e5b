// LossWindow: the training losses on their way from the device to the host. Each step's loss (a
// device scalar) joins a window that is read back in one transfer every --log-every steps
// (Note [Loss read-back]); with N processes the read-back is an all-reduce that also carries the
// stop request of every rank (Note [Preemption]). It feeds the progress display, checks that the
// loss is finite and answers whether the run must stop. Any model: it sees scalar losses only.
// Leaves out: what is logged (the program writes the returned mean where it likes).
#pragma once

#include <optional>
#include <vector>

#include "core/tensor.h"
#include "train/progress.h"
#include "train/run_setup.h"
#include "train/stop_signal.h"

namespace loom::train {

// Note [Loss read-back]
// The step losses stay on the device and are read back together every --log-every steps (one
// sync), at the end of the epoch, and whenever the progress display is about to print a line, so
// that line shows the current loss and rate. With N processes the window is summed over ranks
// first (every rank decides to read back at the same steps: the same counts and the same progress
// style), so every rank sees the same mean loss and a non-finite loss on any rank stops every
// rank at the same step.
//
// Note [Preemption]
// A SIGTERM or SIGINT (a preemption notice, Ctrl-C, or loomrun forwarding either) only sets a
// flag (train/stop_signal.h); the step in flight finishes, a checkpoint of exactly that step is
// written (the same state a --checkpoint-every save holds: model, optimizer, RNG, sampler
// position), and the program exits 128 + signal (train/run_log.h). One process stops after the
// current step. N processes must stop after the same step (or the ranks would block in different
// collectives), so the flag rides in the loss read-back's all-reduce: every rank reads back at
// the same steps, sums the flags and stops when any rank got a signal. That costs no extra
// collective, and bounds the delay by --log-every steps (a signal during evaluation stops the run
// at the end of the epoch, after one all-reduce of the flag: stop_everywhere). loomrun's --grace
// must cover that many steps and a checkpoint save.
class LossWindow {
 public:
  // Installs the SIGTERM/SIGINT handlers (StopSignal) until it goes.
  LossWindow(const TrainConfig& cfg, const RunSetup& run);

  // Adds `step`'s loss; `last` marks the epoch's (or the run's) last step, `samples` is the number
  // of examples the step saw over all ranks. When a read-back is due, reads the window back, gives
  // each step's loss to `progress` and returns the window's mean loss (the mean over ranks too).
  // Errors: a non-finite loss without --allow-nonfinite ("training diverged: the loss at step 7 is
  // nan (last finite loss 2.31 at step 6); lower --lr, ...").
  std::optional<double> add(const Tensor& loss, int64_t step, bool last, EpochProgress& progress,
                            int64_t samples);

  // The signal that stops the run after the last add(), the same on every rank; 0 to go on.
  int stop_signal() const { return stop_; }
  // Agrees on a stop now, outside a read-back (one all-reduce with N processes; end of an epoch).
  int stop_everywhere();

 private:
  std::vector<double> read_back();
  void check_finite(const std::vector<double>& v, int64_t first_step);

  const TrainConfig& cfg_;
  const RunSetup& run_;
  StopSignal signal_;
  std::vector<Tensor> window_;  // device scalars, one per step not yet read back
  int stop_ = 0;
  double last_finite_loss_ = 0;
  int64_t last_finite_step_ = 0;  // 0: no finite loss yet
};

}  // namespace loom::train
