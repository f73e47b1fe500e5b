// Supervises one attempt of this node's workers: starts them, copies their output, and fails fast
// (Note [Fail fast]): the first worker that fails, a signal to loomrun, or a failure reported by
// another node stops them all (SIGTERM, grace period, SIGKILL).
// Leaves out: restarts and nodes (loomrun_main.cpp and node_rendezvous.h decide those).
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distributed/launcher/worker_env.h"

namespace loom::distributed::launcher {

struct GroupSpec {
  std::vector<std::string> program;     // argv of every worker
  std::vector<WorkerIdentity> workers;  // one per local rank
  Environment parent_env;
  double grace_seconds = 3.0;
  int tail_lines = 20;
  std::string log_dir;  // "" -> console; else log_dir/attempt_K/rank_N.*
  bool tee = false;
  // Asked every `remote_poll_ms` while the workers run: a reason string when the job has failed
  // elsewhere (another node), then this group is stopped. Empty function: never asked.
  std::function<std::optional<std::string>()> remote_failure;
  int remote_poll_ms = 200;
  // Told of each worker that ends while the group is running (not while loomrun stops it), with
  // its rank and waitpid status: loomrun records it in the workers' store (Note [Who left] in
  // distributed/process_group/collective_log.h). Empty function: nobody is told.
  std::function<void(int rank, int status)> on_exit;
};

// How one worker ended.
struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int status = 0;                        // waitpid status
  std::string how;                       // describe_exit(status)
  std::vector<std::string> stderr_tail;  // its last stderr lines
  std::string stderr_log;                // the file holding all of it, with --log-dir
};

struct GroupResult {
  enum class Outcome {
    kSucceeded,     // every worker exited 0
    kWorkerFailed,  // failures[0] is the first failure seen (the root cause)
    kSignalled,     // loomrun got SIGINT/SIGTERM/SIGHUP: forwarded, workers stopped
    kRemoteFailed,  // remote_failure() said so: workers stopped
    kSpawnFailed,   // a worker could not be started (spawn_error says why)
  };
  Outcome outcome = Outcome::kSucceeded;
  std::vector<WorkerExit> failures;  // failed on their own, before loomrun stopped anyone
  int signal = 0;                    // kSignalled: which
  std::string remote_reason;         // kRemoteFailed
  std::string spawn_error;           // kSpawnFailed
  double stop_seconds = 0;           // from the stop decision until the last worker was gone
  int killed_after_grace = 0;        // workers still running when the grace period ran out
};

// Runs the workers of one attempt (identity.restart_count) to the end. Needs
// install_signal_pipe() first. Every worker is reaped before it returns.
GroupResult run_worker_group(const GroupSpec& spec);

}  // namespace loom::distributed::launcher
