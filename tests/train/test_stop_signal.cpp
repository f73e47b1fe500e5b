// StopSignal (train/stop_signal.h): SIGTERM and SIGINT only set the request, the first one wins,
// and the destructor puts the previous handlers back.
#include <gtest/gtest.h>
#include <signal.h>

#include "core/error.h"
#include "train/stop_signal.h"

using namespace loom;

namespace {
volatile sig_atomic_t g_previous_saw = 0;
void previous_handler(int sig) { g_previous_saw = sig; }
}  // namespace

TEST(StopSignal, RecordsTheFirstSignalAndRestoresThePreviousHandler) {
  struct sigaction sa = {}, old_term = {}, old_int = {};
  sa.sa_handler = previous_handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGINT, &sa, &old_int);
  {
    train::StopSignal stop;
    EXPECT_EQ(stop.requested(), 0);
    ::raise(SIGINT);
    EXPECT_EQ(stop.requested(), SIGINT);  // the process is still here: only the flag was set
    EXPECT_EQ(g_previous_saw, 0);
    EXPECT_THROW(train::StopSignal second, Error);  // one at a time
  }
  {
    train::StopSignal again;  // a new one starts with no request
    EXPECT_EQ(again.requested(), 0);
    ::raise(SIGTERM);
    EXPECT_EQ(again.requested(), SIGTERM);
  }
  ::raise(SIGTERM);  // the previous handler is back
  EXPECT_EQ(g_previous_saw, SIGTERM);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);
  EXPECT_STREQ(train::stop_signal_name(SIGTERM), "SIGTERM");
}

TEST(StopSignal, ASecondSignalKillsAtOnce) {
  EXPECT_EXIT(
      {
        train::StopSignal stop;
        ::raise(SIGTERM);
        ::raise(SIGTERM);  // asked twice: the default action
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}
