// train/progress: the plain-line and bar formats with an injected clock, and the summary line.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "train/progress.h"

using namespace loom;
using namespace loom::train;

namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(7.4), "0:07");
  EXPECT_EQ(format_duration(185), "3:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(NAN), "?");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, PlainLinesEveryTenthOfTheEpoch) {
  double now = 1000.0;
  std::ostringstream out;
  {
    EpochProgress p(1, 3, 20,
                    {.style = ProgressStyle::Lines, .out = &out, .clock = [&] { return now; }});
    for (int s = 1; s <= 20; ++s) {
      now += 0.5;
      p.step(double(s), 32);  // mean loss after s steps: (s + 1) / 2
    }
    EXPECT_EQ(p.steps_done(), 20);
    EXPECT_DOUBLE_EQ(p.mean_loss(), 10.5);
    EXPECT_DOUBLE_EQ(p.seconds(), 10.0);
    EXPECT_DOUBLE_EQ(p.samples_per_second(), 64.0);
    EXPECT_DOUBLE_EQ(p.ms_per_step(), 500.0);
  }  // finish() in the destructor adds nothing: the last step was already printed
  auto l = lines(out.str());
  ASSERT_EQ(l.size(), 10u) << out.str();
  EXPECT_EQ(l[0], "epoch 1/3  step 2/20 (10%)  loss 1.5000  64 samples/s  ETA 0:09");
  EXPECT_EQ(l[4], "epoch 1/3  step 10/20 (50%)  loss 5.5000  64 samples/s  ETA 0:05");
  EXPECT_EQ(l[9], "epoch 1/3  step 20/20 (100%)  loss 10.5000  64 samples/s  time 0:10");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
}

TEST(Progress, TheRateInTheUnitItIsGiven) {
  double now = 0;
  std::ostringstream out;
  {
    EpochProgress p(1, 1, 1,
                    {.style = ProgressStyle::Lines,
                     .out = &out,
                     .clock = [&] { return now; },
                     .rate_unit = "tok/s"});
    now += 2;
    p.step(1.0, 4096);  // a language model's step: 4096 tokens
  }
  EXPECT_EQ(lines(out.str()).at(0),
            "epoch 1/1  step 1/1 (100%)  loss 1.0000  2048 tok/s  time 0:02");
}

TEST(Progress, PlainLinesWhenStepsDoNotDivideEvenly) {
  double now = 0;
  std::ostringstream out;
  EpochProgress p(2, 2, 25,
                  {.style = ProgressStyle::Lines, .out = &out, .clock = [&] { return now; }});
  std::vector<int64_t> printed;
  for (int s = 1; s <= 25; ++s) {
    now += 1;
    size_t before = out.str().size();
    p.step(1.0, 10);
    if (out.str().size() != before) printed.push_back(s);
  }
  p.finish();
  p.finish();  // idempotent
  EXPECT_EQ(printed, (std::vector<int64_t>{3, 5, 8, 10, 13, 15, 18, 20, 23, 25}));
  EXPECT_EQ(lines(out.str()).size(), 10u);
}

TEST(Progress, EndingEarlyPrintsTheLastState) {
  double now = 0;
  std::ostringstream out;
  EpochProgress p(1, 1, 100,
                  {.style = ProgressStyle::Lines, .out = &out, .clock = [&] { return now; }});
  now = 2;
  p.step(4.0, 8);
  p.finish();
  auto l = lines(out.str());
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0], "epoch 1/1  step 1/100 (1%)  loss 4.0000  4 samples/s  ETA 3:18");
}

TEST(Progress, BarRedrawsInPlaceAtMostEveryRedrawInterval) {
  double now = 0;
  std::ostringstream out;
  EpochProgress p(3, 10, 40,
                  {.style = ProgressStyle::Bar,
                   .out = &out,
                   .clock = [&] { return now; },
                   .redraw_secs = 0.1,
                   .bar_width = 10});
  for (int s = 1; s <= 40; ++s) {
    now += 0.025;  // four steps per redraw interval
    p.step(0.5, 100);
    if (s == 20) {
      EXPECT_EQ(p.status_line(),
                "epoch 3/10 [=====>    ] 20/40  loss 0.5000  4000 samples/s  ETA 0:01");
    }
  }
  p.finish();
  std::string s = out.str();
  size_t redraws = size_t(std::count(s.begin(), s.end(), '\r'));
  EXPECT_GE(redraws, 10u);
  EXPECT_LE(redraws, 12u);  // ~40 * 0.025 / 0.1, plus the last step and finish()
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
  std::string last = s.substr(s.rfind('\r') + 1);
  EXPECT_EQ(last, "epoch 3/10 [==========] 40/40  loss 0.5000  4000 samples/s  time 0:01\x1b[K\n");
}

TEST(Progress, EpochSummaryLine) {
  EpochSummary s{.epoch = 3,
                 .epochs = 10,
                 .train_loss = 0.31214,
                 .test_loss = 0.339,
                 .test_accuracy = 0.88123,
                 .samples_per_second = 12345.4,
                 .ms_per_step = 4.2061,
                 .seconds = 5.14};
  EXPECT_EQ(format_epoch_summary(s),
            "epoch 3/10  train loss 0.3121  test loss 0.3390  test acc 88.12%  12345 samples/s  "
            "4.21 ms/step  5.1 s");
  s.test_loss.reset();
  s.test_accuracy.reset();
  EXPECT_EQ(format_epoch_summary(s),
            "epoch 3/10  train loss 0.3121  12345 samples/s  4.21 ms/step  5.1 s");
}

TEST(Progress, RatesStopAtFinishSoAnEvaluationAfterwardsIsNotCounted) {
  double now = 50.0;
  std::ostringstream out;
  EpochProgress p(1, 1, 4,
                  {.style = ProgressStyle::Lines, .out = &out, .clock = [&] { return now; }});
  for (int s = 1; s <= 4; ++s) {
    now += 0.25;
    p.step(1.0, 10);
  }
  p.finish();
  now += 100.0;  // an evaluation of 100 s
  EXPECT_DOUBLE_EQ(p.seconds(), 1.0);
  EXPECT_DOUBLE_EQ(p.samples_per_second(), 40.0);
  EXPECT_DOUBLE_EQ(p.ms_per_step(), 250.0);
}
