// One worker process: started with fork/exec in its own process group, its stdout and stderr on
// pipes loomrun reads, killed with SIGKILL if loomrun itself dies. Exit statuses as words.
// Leaves out: reading the pipes (output_pump.h) and supervising a group (worker_group.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace loom::distributed::launcher {

struct SpawnedWorker {
  pid_t pid = -1;      // also the worker's process-group id
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
};

// Starts argv[0] (searched on PATH when it has no '/') with exactly `envp`. stdin is /dev/null.
// Throws loom::Error naming the program when it cannot be started (not found, not executable).
SpawnedWorker spawn_worker(const std::vector<std::string>& argv,
                           const std::vector<std::string>& envp);

// Sends `sig` to the worker's whole process group (the worker and anything it started).
// A group that is already gone is not an error.
void signal_worker(pid_t pid, int sig);

// "exit code 3", "signal 9 (SIGKILL)", "exited normally" for a waitpid status.
std::string describe_exit(int status);
// True for a clean exit (code 0).
bool exited_cleanly(int status);
// "SIGTERM" for 15.
std::string signal_name(int sig);

}  // namespace loom::distributed::launcher
