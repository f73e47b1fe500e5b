// The supervision loop of one attempt; see worker_group.h.
#include "distributed/launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "distributed/launcher/output_pump.h"
#include "distributed/launcher/signals.h"
#include "distributed/launcher/worker_process.h"

namespace loom::distributed::launcher {

using Clock = std::chrono::steady_clock;

// Note [Fail fast]
// One event loop polls the signal self-pipe and every worker's stdout/stderr. SIGCHLD reaps
// workers; the first one that did not exit 0 is the root cause. From the moment of that decision
// (or a SIGINT/SIGTERM/SIGHUP to loomrun, or another node's failure) every live worker's process
// group gets SIGTERM (a signal to loomrun is forwarded as that same signal), the loop keeps
// copying output while they shut down, and whatever is still alive after the grace period gets
// SIGKILL. A second SIGINT/SIGTERM skips the grace period. A worker's output pipes are drained
// when it is reaped, so its last stderr lines are in the report even when it died at once.
namespace {

struct Worker {
  WorkerIdentity who;
  pid_t pid = -1;
  bool running = false;
  std::unique_ptr<OutputPump> out, err;
  std::string stderr_log;
};

int open_log(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_CHECK(fd >= 0, "loomrun: cannot write log file ", path, ": ", std::strerror(errno));
  return fd;
}

void make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string dir = path.substr(0, pos);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      LOOM_FAIL("loomrun: cannot create log folder ", dir, ": ", std::strerror(errno));
  }
}

class Supervisor {
 public:
  explicit Supervisor(const GroupSpec& spec) : spec_(spec) {}

  GroupResult run() {
    signal_fd_ = install_signal_pipe();
    try {
      start_all();
    } catch (const std::exception& e) {
      result_.outcome = GroupResult::Outcome::kSpawnFailed;
      result_.spawn_error = e.what();
      begin_stop(SIGTERM);
    }
    loop();
    return result_;
  }

 private:
  void start_all() {
    std::string attempt_dir;
    if (!spec_.log_dir.empty()) {
      attempt_dir = spec_.log_dir + "/attempt_" +
                    std::to_string(spec_.workers.empty() ? 0 : spec_.workers[0].restart_count);
      make_dirs(attempt_dir);
    }
    for (const WorkerIdentity& who : spec_.workers) {
      Worker& w = workers_.emplace_back();
      w.who = who;
      SpawnedWorker s =
          spawn_worker(spec_.program, to_envp(worker_environment(spec_.parent_env, who)));
      w.pid = s.pid;
      w.running = true;
      std::string prefix = "[rank " + std::to_string(who.rank) + "] ";
      int out_file = -1, err_file = -1;
      if (!attempt_dir.empty()) {
        std::string base = attempt_dir + "/rank_" + std::to_string(who.rank);
        out_file = open_log(base + ".stdout");
        err_file = open_log(base + ".stderr");
        w.stderr_log = base + ".stderr";
      }
      bool console = attempt_dir.empty() || spec_.tee;
      w.out = std::make_unique<OutputPump>(s.stdout_fd, prefix, console ? 1 : -1, out_file, 0);
      w.err = std::make_unique<OutputPump>(s.stderr_fd, prefix, console ? 2 : -1, err_file,
                                           spec_.tail_lines);
    }
  }

  bool any_running() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
  }

  void signal_all(int sig) {
    for (Worker& w : workers_)
      if (w.running) signal_worker(w.pid, sig);
  }

  void begin_stop(int sig) {
    if (stopping_) return;
    stopping_ = true;
    stop_started_ = Clock::now();
    kill_deadline_ = stop_started_ + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(spec_.grace_seconds));
    signal_all(sig);
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) break;
      auto it = std::find_if(workers_.begin(), workers_.end(),
                             [&](const Worker& w) { return w.pid == pid && w.running; });
      if (it == workers_.end()) continue;  // not ours (cannot happen: loomrun has no others)
      Worker& w = *it;
      w.running = false;
      w.out->drain();
      w.err->drain();
      if (!stopping_ && spec_.on_exit) spec_.on_exit(w.who.rank, status);
      if (!exited_cleanly(status) && !stopping_) failed_now_.push_back(exit_of(w, status));
    }
    if (!failed_now_.empty()) {
      // Everything that failed in this one batch failed on its own. Which came first is lost, so
      // a death by signal (a crash, a kill) leads over an exit code (often a peer noticing the
      // crash: "connection closed"), then the lowest rank.
      auto key = [](const WorkerExit& e) {
        return std::pair(WIFSIGNALED(e.status) ? 0 : 1, e.rank);
      };
      std::sort(failed_now_.begin(), failed_now_.end(),
                [&](const WorkerExit& a, const WorkerExit& b) { return key(a) < key(b); });
      result_.outcome = GroupResult::Outcome::kWorkerFailed;
      result_.failures = std::move(failed_now_);
      failed_now_.clear();
      begin_stop(SIGTERM);
    }
  }

  WorkerExit exit_of(const Worker& w, int status) const {
    WorkerExit e;
    e.rank = w.who.rank;
    e.local_rank = w.who.local_rank;
    e.pid = w.pid;
    e.status = status;
    e.how = describe_exit(status);
    e.stderr_tail = w.err->tail();
    e.stderr_log = w.stderr_log;
    return e;
  }

  void on_signals() {
    for (int sig : take_signals()) {
      if (sig == SIGCHLD) continue;  // reap() runs after every wake-up
      if (!stopping_) {
        result_.outcome = GroupResult::Outcome::kSignalled;
        result_.signal = sig;
        begin_stop(sig);  // forwarded as the same signal
      } else {
        signal_all(SIGKILL);  // asked twice: no more grace
      }
    }
  }

  void check_remote() {
    if (!spec_.remote_failure || stopping_) return;
    auto now = Clock::now();
    if (now < next_remote_poll_) return;
    next_remote_poll_ = now + std::chrono::milliseconds(spec_.remote_poll_ms);
    if (auto reason = spec_.remote_failure()) {
      result_.outcome = GroupResult::Outcome::kRemoteFailed;
      result_.remote_reason = *reason;
      begin_stop(SIGTERM);
    }
  }

  int poll_timeout_ms() const {
    int ms = spec_.remote_failure ? spec_.remote_poll_ms : 1000;
    if (stopping_ && !killed_) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(kill_deadline_ - Clock::now());
      ms = std::min<int>(ms, static_cast<int>(std::max<int64_t>(0, left.count())) + 1);
    }
    return ms;
  }

  void loop() {
    while (any_running()) {
      std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
      std::vector<OutputPump*> pumps;
      for (Worker& w : workers_)
        for (OutputPump* p : {w.out.get(), w.err.get()})
          if (p && p->open()) {
            fds.push_back({p->fd(), POLLIN, 0});
            pumps.push_back(p);
          }
      int n = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (n < 0 && errno != EINTR) LOOM_FAIL("loomrun: poll failed: ", std::strerror(errno));
      for (size_t i = 1; n > 0 && i < fds.size(); ++i)
        if (fds[i].revents) pumps[i - 1]->pump();
      on_signals();
      reap();
      check_remote();
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
        result_.killed_after_grace = int(std::count_if(workers_.begin(), workers_.end(),
                                                       [](const Worker& w) { return w.running; }));
        signal_all(SIGKILL);
        killed_ = true;
      }
    }
    if (stopping_) {
      for (Worker& w : workers_) signal_worker(w.pid, SIGKILL);  // leftovers of their groups
      result_.stop_seconds = std::chrono::duration<double>(Clock::now() - stop_started_).count();
    }
    for (Worker& w : workers_) {  // whatever a leftover child still had in the pipes
      if (w.out) w.out->drain();
      if (w.err) w.err->drain();
    }
  }

  const GroupSpec& spec_;
  std::vector<Worker> workers_;
  GroupResult result_;
  std::vector<WorkerExit> failed_now_;
  int signal_fd_ = -1;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point stop_started_, kill_deadline_;
  Clock::time_point next_remote_poll_ = Clock::now();
};

}  // namespace

GroupResult run_worker_group(const GroupSpec& spec) { return Supervisor(spec).run(); }

}  // namespace loom::distributed::launcher
