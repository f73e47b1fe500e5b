// Progress lines on a pipe stay current: line_due() tells a caller that reads the loss back only
// every few steps where a line will be printed, and the epoch summary keeps evaluation time apart
// from training throughput. Leaves out: the formats themselves (test_progress.cpp).
#include <gtest/gtest.h>

#include <sstream>

#include "train/progress.h"

using namespace loom;
using namespace loom::train;

TEST(ProgressCurrent, LineDueAtEachTenthAndAtTheEnd) {
  std::ostringstream out;
  EpochProgress p(1, 1, 200,
                  {.style = ProgressStyle::Lines, .out = &out, .clock = [] { return 0.0; }});
  std::vector<int64_t> due;
  for (int64_t n = 1; n <= 200; ++n) {
    if (p.line_due(n)) due.push_back(n);
    p.step(1.0, 8);
  }
  EXPECT_EQ(due, (std::vector<int64_t>{20, 40, 60, 80, 100, 120, 140, 160, 180, 200}));
  // A caller flushing its window at these steps prints lines whose step count is the real one.
  EXPECT_NE(out.str().find("step 20/200"), std::string::npos) << out.str();
}

TEST(ProgressCurrent, ABarNeverAsksForAnEarlyReadBack) {
  std::ostringstream out;
  EpochProgress p(1, 1, 50,
                  {.style = ProgressStyle::Bar, .out = &out, .clock = [] { return 0.0; }});
  for (int64_t n = 1; n <= 50; ++n) EXPECT_FALSE(p.line_due(n));
}

TEST(ProgressCurrent, SummaryShowsEvaluationTimeApart) {
  EpochSummary s{2, 10, 0.5, 0.4, 0.875, 1000, 2.5, 3.0, 0.7};
  std::string line = format_epoch_summary(s);
  EXPECT_NE(line.find("1000 samples/s  2.50 ms/step  3.0 s  eval 0.7 s"), std::string::npos)
      << line;
  s.eval_seconds.reset();
  EXPECT_EQ(format_epoch_summary(s).find("eval"), std::string::npos);
}
