// loomrun: loom's torchrun-compatible launcher. Starts --nproc_per_node workers on this node (and,
// with --nnodes, meets the other nodes' loomruns), fails fast, restarts up to --max_restarts.
// Leaves out: the pieces it composes (options.h, worker_group.h, node_rendezvous.h).
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "distributed/launcher/node_rendezvous.h"
#include "distributed/launcher/options.h"
#include "distributed/launcher/signals.h"
#include "distributed/launcher/worker_group.h"
#include "distributed/launcher/worker_process.h"
#include "distributed/store/tcp_store.h"

using namespace loom::distributed::launcher;
using Outcome = GroupResult::Outcome;

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

// Everything loomrun says itself goes to stderr, prefixed, so it stands out from the workers'.
void say(const std::string& line) {
  std::cerr << (line.rfind("loomrun: ", 0) == 0 ? "" : "loomrun: ") << line << std::endl;
}

std::string failure_summary(const WorkerExit& f, const LaunchOptions& o) {
  std::ostringstream s;
  if (o.nnodes > 1) s << "node " << o.node_rank << ": ";
  s << "rank " << f.rank << " (local rank " << f.local_rank << ", pid " << f.pid
    << ") failed: " << f.how;
  return s.str();
}

// The lines printed when this node's workers failed; returns the one-line reason for the others.
std::string report_failures(const GroupResult& r, const LaunchOptions& o) {
  const WorkerExit& first = r.failures.front();
  say(failure_summary(first, o));
  if (!first.stderr_tail.empty()) {
    say("last " + std::to_string(first.stderr_tail.size()) + " stderr lines of rank " +
        std::to_string(first.rank) + ":");
    for (const auto& line : first.stderr_tail)
      std::cerr << "  [rank " << first.rank << "] " << line << "\n";
  } else {
    say("rank " + std::to_string(first.rank) + " wrote nothing to stderr");
  }
  if (!first.stderr_log.empty()) say("its whole stderr: " + first.stderr_log);
  for (size_t i = 1; i < r.failures.size(); ++i) say("also " + failure_summary(r.failures[i], o));
  say("stopped the other workers in " + seconds(r.stop_seconds));
  std::string reason = failure_summary(first, o);
  if (!first.stderr_tail.empty()) reason += "; last stderr line: " + first.stderr_tail.back();
  return reason;
}

// The worker group of one attempt: this node's ranks where.first_rank.. of where.world_size,
// each with torchrun's identity (worker_env.h).
GroupSpec group_spec(const LaunchOptions& o, const Environment& parent, const NodeAssignment& where,
                     int attempt, bool serve_store) {
  GroupSpec spec;
  spec.program = o.program;
  spec.parent_env = parent;
  spec.grace_seconds = o.grace_seconds;
  spec.tail_lines = o.tail_lines;
  spec.log_dir = o.log_dir;
  spec.tee = o.tee;
  for (int l = 0; l < o.nproc_per_node; ++l) {
    WorkerIdentity w;
    w.rank = where.first_rank + l;
    w.local_rank = l;
    w.world_size = where.world_size;
    w.local_world_size = o.nproc_per_node;
    w.group_rank = o.node_rank;
    w.nnodes = o.nnodes;
    w.master_addr = o.master_addr;
    w.master_port = o.master_port;
    w.restart_count = attempt;
    w.max_restarts = o.max_restarts;
    w.launcher_store = serve_store;
    spec.workers.push_back(w);
  }
  return spec;
}

// Note [Who left] (distributed/process_group/collective_log.h): each worker that ends while the
// others run is recorded under the world group's "exit/<rank>" in the workers' store ("exit status
// 0", "killed by signal 9 (SIGKILL)"), so that a rank whose collective fails can name it. The
// client connects at the first exit; a store that cannot be reached is left alone (the job is
// ending anyway).
std::function<void(int, int)> exit_recorder(const LaunchOptions& o) {
  auto store = std::make_shared<std::shared_ptr<loom::distributed::Store>>();
  return [addr = o.master_addr, port = o.master_port, store](int rank, int status) {
    const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                              : "killed by " + describe_exit(status);
    try {
      if (!*store) {
        loom::distributed::TCPStoreOptions opts;
        opts.timeout = std::chrono::seconds(2);
        *store = std::make_shared<loom::distributed::PrefixStore>(
            "world", std::make_shared<loom::distributed::TCPStore>(addr, port, opts));
      }
      (*store)->set("exit/" + std::to_string(rank), how);
    } catch (const std::exception&) {
    }
  };
}

// Says what ended an attempt that did not succeed (and tells the other nodes); returns the exit
// code the job ends with if this was its last attempt: 128 + the signal, else 1.
int report_outcome(const GroupResult& r, const LaunchOptions& o, NodeRendezvous* nodes,
                   int attempt) {
  int code = 1;
  switch (r.outcome) {
    case Outcome::kWorkerFailed: {
      std::string reason = report_failures(r, o);
      if (nodes) nodes->report_failure(attempt, reason);
      break;
    }
    case Outcome::kSignalled:
      // A trainer stops at a step boundary and saves first (docs/reliability.md, Preemption):
      // say whether every worker got there within --grace.
      say("got " + signal_name(r.signal) + ": forwarded to every worker, all stopped in " +
          seconds(r.stop_seconds) +
          (r.killed_after_grace == 0 ? std::string(" (each exited on its own)")
                                     : " (" + std::to_string(r.killed_after_grace) +
                                           " still running after --grace, killed with SIGKILL)"));
      if (nodes)
        nodes->report_failure(attempt, "node " + std::to_string(o.node_rank) + "'s loomrun got " +
                                           signal_name(r.signal));
      code = 128 + r.signal;
      break;
    case Outcome::kRemoteFailed:
      say("job failed elsewhere: " + r.remote_reason);
      say("stopped this node's workers in " + seconds(r.stop_seconds));
      break;
    case Outcome::kSpawnFailed:
      say(r.spawn_error);
      if (nodes)
        nodes->report_failure(attempt,
                              "node " + std::to_string(o.node_rank) + ": " + r.spawn_error);
      break;
    case Outcome::kSucceeded:
      break;
  }
  return code;
}

// With --nnodes > 1: this node's side of the rendezvous of the loomruns (node 0 serves it).
std::unique_ptr<NodeRendezvous> join_nodes(const LaunchOptions& o) {
  if (o.nnodes == 1) return nullptr;
  return std::make_unique<NodeRendezvous>(
      o.master_addr, o.rdzv_port, o.nnodes, o.node_rank,
      std::chrono::milliseconds(static_cast<int64_t>(o.rdzv_timeout_seconds * 1000)),
      std::chrono::milliseconds(static_cast<int64_t>(o.node_timeout_seconds * 1000)));
}

// What loomrun sets in the workers' environment that the user may not expect, said once.
void say_environment_notes(const LaunchOptions& o, const Environment& parent) {
  std::vector<std::string> notes;
  worker_environment(parent, WorkerIdentity{}, &notes);
  for (const auto& n : notes) say(n);
  if (o.nproc_per_node > 1 && !parent.count("OMP_NUM_THREADS") && !o.quiet)
    say("OMP_NUM_THREADS=1 for each worker (set OMP_NUM_THREADS to choose)");
}

// After an attempt's workers are gone: the exit code when the job is over (success, a signal,
// the last failure), or none to restart the group.
std::optional<int> end_of_attempt(GroupResult& r, const LaunchOptions& o, NodeRendezvous* nodes,
                                  int attempt, const int& interrupted,
                                  const std::function<bool()>& cancelled) {
  if (r.outcome == Outcome::kSucceeded && nodes) {
    if (auto why = nodes->finish(attempt, cancelled)) {
      if (interrupted) {  // Ctrl-C while waiting for the other nodes: they must stop too
        r.outcome = Outcome::kSignalled;
        r.signal = interrupted;
      } else {
        r.outcome = Outcome::kRemoteFailed;
        r.remote_reason = *why;
      }
    }
  }
  if (r.outcome == Outcome::kSucceeded) {
    if (!o.quiet) say("all workers of this node exited normally");
    return 0;
  }
  const bool last = attempt >= o.max_restarts || r.outcome == Outcome::kSignalled ||
                    r.outcome == Outcome::kSpawnFailed;
  const int code = report_outcome(r, o, nodes, attempt);
  if (nodes) nodes->stopped(attempt, last, o.grace_seconds);
  if (last && r.outcome == Outcome::kSignalled) {
    say("job stopped by " + signal_name(r.signal) + " after " + std::to_string(attempt + 1) +
        " attempt(s); exit code " + std::to_string(code));
    return code;
  }
  if (last) {
    say("job failed after " + std::to_string(attempt + 1) + " attempt(s) (--max_restarts " +
        std::to_string(o.max_restarts) + ")");
    return code;
  }
  say("restarting all workers (restart " + std::to_string(attempt + 1) + " of " +
      std::to_string(o.max_restarts) + ")");
  return std::nullopt;
}

int run(const LaunchOptions& o) {
  install_signal_pipe();
  const Environment parent = current_environment();
  std::unique_ptr<NodeRendezvous> nodes = join_nodes(o);
  say_environment_notes(o, parent);
  int interrupted = 0;  // a signal that came while no worker ran (waiting for the nodes)
  std::function<bool()> cancelled = [&interrupted] {
    for (int sig : take_signals())
      if (sig != SIGCHLD) interrupted = sig;
    return interrupted != 0;
  };

  const bool serve_store = o.worker_store == "loomrun";
  for (int attempt = 0;; ++attempt) {
    // Note [Who serves the store]
    // With --worker_store loomrun (the default), node 0's loomrun serves the workers' store on
    // MASTER_ADDR:MASTER_PORT and every worker connects as a client (LOOM_STORE_EXTERNAL=1, read
    // by init_process_group; TORCHELASTIC_USE_AGENT_STORE=True for PyTorch programs). It is a
    // fresh server per attempt, so a restarted group never reads keys of the failed one, and it
    // stays up until every node of the attempt is done. With rank0, the program's rank 0 serves
    // it, as without a launcher. The loomruns' own store (node_rendezvous.h) is another port.
    std::unique_ptr<loom::distributed::TCPStoreServer> worker_store;
    if (serve_store && o.node_rank == 0)
      worker_store =
          std::make_unique<loom::distributed::TCPStoreServer>(o.master_addr, o.master_port);
    NodeAssignment where{o.node_rank * o.nproc_per_node, o.nnodes * o.nproc_per_node};
    if (nodes) {
      try {
        where = nodes->join(attempt, o.nproc_per_node, o.max_restarts, cancelled);
      } catch (const std::exception& e) {
        say(e.what());
        return interrupted ? 128 + interrupted : 1;
      }
    }
    GroupSpec spec = group_spec(o, parent, where, attempt, serve_store);
    if (nodes) spec.remote_failure = [&nodes, attempt] { return nodes->failure(attempt); };
    if (serve_store) spec.on_exit = exit_recorder(o);
    if (!o.quiet)
      say("attempt " + std::to_string(attempt) + ": starting ranks " +
          std::to_string(where.first_rank) + ".." +
          std::to_string(where.first_rank + o.nproc_per_node - 1) + " of world size " +
          std::to_string(where.world_size) + " on node " + std::to_string(o.node_rank) + " (" +
          o.master_addr + ":" + std::to_string(o.master_port) + ")");
    GroupResult r = run_worker_group(spec);
    if (auto code = end_of_attempt(r, o, nodes.get(), attempt, interrupted, cancelled))
      return *code;
  }
}

}  // namespace

int main(int argc, char** argv) {
  LaunchOptions options;
  try {
    options = parse_launch_options(argc, argv);
  } catch (const std::exception& e) {
    say(e.what());
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}
