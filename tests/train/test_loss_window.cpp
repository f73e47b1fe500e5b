// The loss read-back window (train/loss_window.h) in a world of one: read-backs every
// --log-every steps and at the last step with the window's mean, the progress fed with every
// step, the divergence error naming the step and the last finite loss, and a SIGTERM turned into
// an agreed stop. Leaves out: the sum over ranks (test_train_mlp_ddp.cpp runs it under loomrun).
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "autograd/ops/ops.h"
#include "core/error.h"
#include "train/loss_window.h"

using namespace loom;
using namespace loom::train;

namespace {

TrainConfig config(int64_t log_every) {
  TrainConfig c;
  c.device = "cpu";
  c.log_every = log_every;
  return c;
}

Tensor scalar(double v) { return full({}, v); }

// A progress display that prints one line, at the end of the epoch (no extra read-backs).
ProgressOptions quiet(std::ostream& out) {
  ProgressOptions o;
  o.style = ProgressStyle::Lines;
  o.out = &out;
  o.line_every = 1.0;
  return o;
}

}  // namespace

TEST(LossWindow, ReadsBackEveryLogEveryStepsAndAtTheLastWithTheWindowMean) {
  TrainConfig cfg = config(3);
  RunSetup run(cfg);
  LossWindow window(cfg, run);
  std::ostringstream out;
  EpochProgress progress(1, 1, 7, quiet(out));
  std::vector<int64_t> read_at;
  std::vector<double> means;
  for (int64_t step = 1; step <= 7; ++step) {
    auto mean = window.add(scalar(double(step)), step, step == 7, progress, 32);
    if (mean) {
      read_at.push_back(step);
      means.push_back(*mean);
    }
    EXPECT_EQ(progress.steps_done(), read_at.empty() ? 0 : read_at.back());
  }
  EXPECT_EQ(read_at, (std::vector<int64_t>{3, 6, 7}));
  EXPECT_EQ(means, (std::vector<double>{2.0, 5.0, 7.0}));  // (1+2+3)/3, (4+5+6)/3, 7
  EXPECT_DOUBLE_EQ(progress.mean_loss(), 4.0);
  EXPECT_EQ(window.stop_signal(), 0);
}

TEST(LossWindow, NonFiniteLossNamesTheStepAndTheLastFiniteLoss) {
  TrainConfig cfg = config(4);
  RunSetup run(cfg);
  LossWindow window(cfg, run);
  std::ostringstream out;
  EpochProgress progress(1, 1, 8, quiet(out));
  window.add(scalar(1.5), 1, false, progress, 32);
  window.add(scalar(1.25), 2, false, progress, 32);
  window.add(scalar(std::numeric_limits<double>::quiet_NaN()), 3, false, progress, 32);
  try {
    window.add(scalar(2.0), 4, false, progress, 32);
    FAIL() << "a nan loss passed";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("training diverged: the loss at step 3 is nan"), std::string::npos) << what;
    EXPECT_NE(what.find("(last finite loss 1.25 at step 2)"), std::string::npos) << what;
  }
}

TEST(LossWindow, AllowNonfiniteGoesOnAndTheFirstWindowSaysNone) {
  TrainConfig cfg = config(1);
  RunSetup run(cfg);
  {
    LossWindow window(cfg, run);
    std::ostringstream out;
    EpochProgress progress(1, 1, 2, quiet(out));
    try {
      window.add(scalar(std::numeric_limits<double>::infinity()), 1, false, progress, 32);
      FAIL() << "an inf loss passed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is inf (last finite loss none)"), std::string::npos)
          << e.what();
    }
  }
  cfg.allow_nonfinite = true;
  LossWindow window(cfg, run);
  std::ostringstream out;
  EpochProgress progress(1, 1, 2, quiet(out));
  auto mean = window.add(scalar(std::numeric_limits<double>::infinity()), 1, false, progress, 32);
  ASSERT_TRUE(mean.has_value());
  EXPECT_TRUE(std::isinf(*mean));
}

TEST(LossWindow, ASigtermBecomesTheStopAfterTheStepInFlight) {
  TrainConfig cfg = config(5);
  RunSetup run(cfg);
  LossWindow window(cfg, run);
  std::ostringstream out;
  EpochProgress progress(1, 1, 10, quiet(out));
  window.add(scalar(1.0), 1, false, progress, 32);
  EXPECT_EQ(window.stop_signal(), 0);
  EXPECT_EQ(window.stop_everywhere(), 0);
  ::raise(SIGTERM);  // the handler only sets the flag
  EXPECT_EQ(window.stop_signal(), 0) << "seen after the next step, not mid-step";
  window.add(scalar(1.0), 2, false, progress, 32);
  EXPECT_EQ(window.stop_signal(), SIGTERM);
  EXPECT_EQ(window.stop_everywhere(), SIGTERM);
}
