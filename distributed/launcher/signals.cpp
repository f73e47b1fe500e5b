// The self-pipe for signals; see signals.h.
#include "distributed/launcher/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace loom::distributed::launcher {

static int g_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(g_pipe[1], &b, 1);  // full pipe: the byte is dropped, fine for CHLD
  (void)ignored;
  errno = saved;
}

int install_signal_pipe() {
  if (g_pipe[0] >= 0) return g_pipe[0];
  LOOM_CHECK(::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) == 0,
             "loomrun: pipe2 failed: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return g_pipe[0];
}

std::vector<int> take_signals() {
  std::vector<int> out;
  if (g_pipe[0] < 0) return out;
  unsigned char buf[64];
  for (;;) {
    ssize_t n = ::read(g_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

}  // namespace loom::distributed::launcher
