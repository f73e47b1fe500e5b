// Starting and signalling worker processes; see worker_process.h.
#include "distributed/launcher/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace loom::distributed::launcher {

// The file execve will run: argv0 itself when it names a path, else the first executable match on
// PATH (resolved here, before fork, so the child only calls async-signal-safe functions).
static std::string resolve_program(const std::string& argv0) {
  LOOM_CHECK(!argv0.empty(), "loomrun: empty program name");
  if (argv0.find('/') != std::string::npos) return argv0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + argv0;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  LOOM_FAIL("loomrun: program '", argv0, "' not found on PATH");
}

static void make_pipe(int fds[2]) {
  LOOM_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "loomrun: pipe2 failed: ", std::strerror(errno));
}

SpawnedWorker spawn_worker(const std::vector<std::string>& argv,
                           const std::vector<std::string>& envp) {
  LOOM_CHECK(!argv.empty(), "loomrun: no program to start");
  const std::string file = resolve_program(argv[0]);
  std::vector<char*> cargv, cenvp;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envp) cenvp.push_back(const_cast<char*>(e.c_str()));
  cenvp.push_back(nullptr);

  int out[2], err[2], status_pipe[2];
  make_pipe(out);
  make_pipe(err);
  make_pipe(status_pipe);  // the child writes errno here if execve fails; closes on success
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], status_pipe[0], status_pipe[1]}) ::close(fd);
    LOOM_FAIL("loomrun: fork failed: ", std::strerror(e));
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only (the parent may have threads, e.g. the store).
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // loomrun killed with -9: its workers die too
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(file.c_str(), cargv.data(), cenvp.data());
    int e = errno;
    ssize_t ignored = ::write(status_pipe[1], &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a signal sent right after spawn reaches the group
  ::close(out[1]);
  ::close(err[1]);
  ::close(status_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n == sizeof exec_errno) {
    ::waitpid(pid, nullptr, 0);
    ::close(out[0]);
    ::close(err[0]);
    LOOM_FAIL("loomrun: cannot execute '", file, "': ", std::strerror(exec_errno));
  }
  ::fcntl(out[0], F_SETFL, ::fcntl(out[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, ::fcntl(err[0], F_GETFL) | O_NONBLOCK);
  return {pid, out[0], err[0]};
}

void signal_worker(pid_t pid, int sig) {
  if (pid <= 0) return;
  if (::killpg(pid, sig) != 0 && errno == ESRCH) ::kill(pid, sig);  // group gone: the leader?
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) {
    int code = WEXITSTATUS(status);
    return code == 0 ? "exited normally" : "exit code " + std::to_string(code);
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string s = "signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "status " + std::to_string(status);
}

bool exited_cleanly(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace loom::distributed::launcher
