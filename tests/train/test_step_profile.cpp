// StepProfiler (train/step_profile.h) on the CPU: each phase is the gap between its two marks
// (Note [Step phases]), totals add up over steps, and the summary divides them by the step count.
// The marks are spaced by sleeps of different lengths, and the test brackets each mark with its
// own clock readings, so a phase measured between the wrong marks lands outside its window.
// Leaves out: CUDA event timing (the GPU runs of examples/ exercise it with --profile).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "train/step_profile.h"

using namespace loom;
using namespace loom::train;

namespace {

// Sleeps, in ms, before each mark after StepBegin: data, forward, backward, all-reduce, optimizer.
// All different, so a phase measured between the wrong marks falls outside its window.
constexpr std::array<double, 5> kSleep = {20, 5, 40, 12, 60};

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Each phase's window [lo, hi] in ms: the test reads the clock just before and just after each
// mark, so the profiler's own reading of mark m lies in [before[m], after[m]] however long a busy
// machine keeps the thread asleep, and phase i (mark i to mark i + 1) lies in
// [before[i + 1] - after[i], after[i + 1] - before[i]].
struct Windows {
  std::array<double, 5> lo{}, hi{};
};

void one_step(StepProfiler& p, Windows& w) {
  std::array<double, StepProfiler::kMarks> before{}, after{};
  for (int m = 0; m < StepProfiler::kMarks; ++m) {
    if (m > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kSleep[size_t(m - 1)]));
    before[size_t(m)] = now_ms();
    p.mark(StepProfiler::Mark(m));
    after[size_t(m)] = now_ms();
  }
  p.end_step();
  for (size_t i = 0; i < 5; ++i) {
    w.lo[i] += before[i + 1] - after[i];
    w.hi[i] += after[i + 1] - before[i];
  }
}

void expect_in(double got, const Windows& w, size_t i, const char* phase) {
  EXPECT_GE(got, w.lo[i]) << phase;
  EXPECT_LE(got, w.hi[i]) << phase;
}

}  // namespace

TEST(StepProfiler, EachPhaseIsTheGapBetweenItsMarks) {
  StepProfiler p(kCPU);
  Windows w;
  one_step(p, w);
  one_step(p, w);
  StepProfiler::Phases t = p.totals();
  EXPECT_EQ(t.steps, 2);
  expect_in(t.data, w, 0, "data");
  expect_in(t.forward, w, 1, "forward");
  expect_in(t.backward, w, 2, "backward");
  expect_in(t.allreduce_exposed, w, 3, "all-reduce exposed");
  expect_in(t.optimizer, w, 4, "optimizer");
  EXPECT_GE(t.backward, 2 * kSleep[2]);  // the windows hold the sleeps: a sanity check of them
  EXPECT_DOUBLE_EQ(t.total(), t.data + t.forward + t.backward + t.allreduce_exposed + t.optimizer);
}

TEST(StepProfiler, SummaryDividesTotalsByTheStepCount) {
  StepProfiler p(kCPU);
  Windows w;
  for (int i = 0; i < 3; ++i) one_step(p, w);
  StepProfiler::Phases t = p.totals();
  int rank = -1;
  long steps = 0;
  double per = 0, data = 0, fwd = 0, bwd = 0, ar = 0, opt = 0;
  char clock[32] = {};
  std::string s = p.summary(3);
  ASSERT_EQ(std::sscanf(s.c_str(),
                        "rank %d: %ld steps, ms/step %lf = data %lf + forward %lf + backward %lf + "
                        "all-reduce exposed %lf + optimizer %lf (%31[^)])",
                        &rank, &steps, &per, &data, &fwd, &bwd, &ar, &opt, clock),
            9)
      << s;
  EXPECT_EQ(rank, 3);
  EXPECT_EQ(steps, 3);
  EXPECT_STREQ(clock, "wall clock");
  // Printed with three decimals: each agrees with the total over three steps to 0.0005 ms.
  EXPECT_NEAR(per, t.total() / 3, 5e-4);
  EXPECT_NEAR(data, t.data / 3, 5e-4);
  EXPECT_NEAR(fwd, t.forward / 3, 5e-4);
  EXPECT_NEAR(bwd, t.backward / 3, 5e-4);
  EXPECT_NEAR(ar, t.allreduce_exposed / 3, 5e-4);
  EXPECT_NEAR(opt, t.optimizer / 3, 5e-4);
  EXPECT_GE(per, kSleep[0] + kSleep[1] + kSleep[2] + kSleep[3] + kSleep[4]);
}

TEST(StepProfiler, NoStepsYetSummarizesZeros) {
  StepProfiler p(kCPU);
  EXPECT_EQ(p.summary(0),
            "rank 0: 0 steps, ms/step 0.000 = data 0.000 + forward 0.000 + backward 0.000 + "
            "all-reduce exposed 0.000 + optimizer 0.000 (wall clock)");
}

TEST(StepProfiler, MarksResetAfterEachStep) {
  StepProfiler p(kCPU);
  EXPECT_FALSE(p.marked(StepProfiler::DataReady));
  p.mark(StepProfiler::DataReady);
  EXPECT_TRUE(p.marked(StepProfiler::DataReady));
  EXPECT_FALSE(p.marked(StepProfiler::ForwardEnd));
  for (int m = 0; m < StepProfiler::kMarks; ++m) p.mark(StepProfiler::Mark(m));
  p.end_step();
  for (int m = 0; m < StepProfiler::kMarks; ++m) EXPECT_FALSE(p.marked(StepProfiler::Mark(m))) << m;
}

TEST(StepProfiler, EndStepWithAMissingMarkNamesIt) {
  StepProfiler p(kCPU);
  p.mark(StepProfiler::StepBegin);
  p.mark(StepProfiler::DataReady);
  p.mark(StepProfiler::ForwardEnd);
  p.mark(StepProfiler::BackwardEnd);  // BackwardComputed (3) is missing
  p.mark(StepProfiler::OptimizerEnd);
  try {
    p.end_step();
    FAIL() << "end_step accepted a step without BackwardComputed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mark 3 was not recorded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p.totals().steps, 0);
}
