// Progress reporting for training loops: a progress bar per epoch redrawn in place on a terminal,
// plain periodic lines otherwise (logs, CI), and the one-line epoch summary.
// Leaves out: multi-line displays and nested bars; what is printed only, never what is measured
// on the device (the caller passes the loss it already has on the host).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>

namespace loom::train {

// Seconds from a monotonic clock; tests inject their own.
using ProgressClock = std::function<double()>;
double steady_seconds();

enum class ProgressStyle { Auto, Bar, Lines };  // Auto: Bar when stdout is a terminal

struct ProgressOptions {
  ProgressStyle style = ProgressStyle::Auto;
  std::ostream* out = nullptr;  // default std::cout
  ProgressClock clock;          // default steady_seconds
  double line_every = 0.1;      // Lines: a line each time this fraction of the epoch is done
  double redraw_secs = 0.1;     // Bar: redraw at most this often (and at the last step)
  int bar_width = 30;
  const char* rate_unit = "samples/s";  // "tok/s" where a step's samples are tokens
};

// "0:07", "3:05", "1:02:03" (hours only when needed).
std::string format_duration(double seconds);

class EpochProgress {
 public:
  // epoch counts from 1; total_steps is the number of steps in this epoch.
  EpochProgress(int64_t epoch, int64_t epochs, int64_t total_steps, ProgressOptions opt = {});
  ~EpochProgress();  // finish() if it was not called

  // After each training step: its loss and how many samples it saw.
  void step(double loss, int64_t samples);
  // Lines style: whether the step that makes steps_done() == n prints a line. A caller that reads
  // the loss back only every few steps reads it at such a step too, so the line is current.
  bool line_due(int64_t n) const;
  // Ends the epoch's display (the bar's final line and newline).
  void finish();

  int64_t steps_done() const { return done_; }
  double mean_loss() const { return done_ ? loss_sum_ / double(done_) : 0.0; }
  // Since construction, up to finish(): the rates stay the training's while an evaluation runs.
  double seconds() const;
  double samples_per_second() const;
  double ms_per_step() const;
  // The text of the current status, as the bar or a line would show it (no \r, no newline).
  std::string status_line() const;

 private:
  void draw(bool force);

  int64_t epoch_, epochs_, total_;
  ProgressOptions opt_;
  bool bar_;
  double start_;
  double last_draw_ = -1e300;
  int64_t done_ = 0, samples_ = 0;
  double loss_sum_ = 0;
  int64_t next_line_ = 1;        // Lines: the next multiple of line_every to report
  int64_t last_line_step_ = -1;  // Lines: the step of the last line printed
  bool finished_ = false;
  double end_ = 0;  // the clock at finish()
};

// What one epoch produced, for the summary line.
struct EpochSummary {
  int64_t epoch = 0, epochs = 0;
  double train_loss = 0;
  std::optional<double> test_loss;
  std::optional<double> test_accuracy;  // a fraction in [0, 1]
  double samples_per_second = 0;
  double ms_per_step = 0;
  double seconds = 0;  // training only: samples/s and ms/step exclude evaluation
  std::optional<double> eval_seconds = std::nullopt;  // the evaluation's own time
};

// "epoch 3/10  train loss 0.3121  test loss 0.3390  test acc 88.12%  12345 samples/s
//  4.21 ms/step  5.1 s  eval 0.4 s" (on one line; the test and eval parts only when present).
std::string format_epoch_summary(const EpochSummary& s);

}  // namespace loom::train
