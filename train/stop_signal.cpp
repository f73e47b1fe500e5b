// StopSignal: async-signal-safe handlers that only record the signal. See train/stop_signal.h.
#include "train/stop_signal.h"

#include <signal.h>

#include <atomic>

#include "core/error.h"

namespace loom::train {

namespace {

volatile sig_atomic_t g_requested = 0;
std::atomic<bool> g_installed{false};
struct sigaction g_prev_term, g_prev_int;

void on_stop_signal(int sig) {
  if (g_requested != 0) {  // asked twice: no more grace, die as the signal would
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_requested = sig;
}

}  // namespace

StopSignal::StopSignal() {
  LOOM_CHECK(!g_installed.exchange(true), "StopSignal: only one may exist at a time");
  g_requested = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocking read or collective goes on; the step boundary decides
  ::sigaction(SIGTERM, &sa, &g_prev_term);
  ::sigaction(SIGINT, &sa, &g_prev_int);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGTERM, &g_prev_term, nullptr);
  ::sigaction(SIGINT, &g_prev_int, nullptr);
  g_installed = false;
}

int StopSignal::requested() const { return int(g_requested); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

}  // namespace loom::train
