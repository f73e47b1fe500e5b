// StopSignal: turns SIGTERM and SIGINT into a request to stop at the next step boundary (a
// preemption notice: save a checkpoint, then exit) instead of dying mid-step. A second such
// signal kills the process at once (the default action), as a second Ctrl-C does elsewhere.
// Leaves out: agreeing on the stop step between processes (the trainer all-reduces the request,
// Note [Preemption] in train/loss_window.h) and any other signal.
#pragma once

namespace loom::train {

class StopSignal {
 public:
  // Installs the handlers; the destructor puts the previous ones back. One instance at a time.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The first SIGTERM or SIGINT received since construction, 0 when none came.
  int requested() const;
};

// "SIGTERM", "SIGINT", or "signal N".
const char* stop_signal_name(int sig);

}  // namespace loom::train
