// loomrun's signal handling as a file descriptor: SIGCHLD, SIGINT, SIGTERM and SIGHUP are written
// by their handlers into a self-pipe that the supervision loop polls with the workers' output.
// Leaves out: what to do about them (worker_group.cpp).
#pragma once

#include <vector>

namespace loom::distributed::launcher {

// Installs the handlers (once; later calls do nothing) and ignores SIGPIPE (a closed console must
// not kill the supervisor). Returns the read end to poll.
int install_signal_pipe();

// The signals delivered since the last call, in order (reads the pipe without blocking).
std::vector<int> take_signals();

}  // namespace loom::distributed::launcher
