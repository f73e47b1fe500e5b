// Starting N worker processes for a distributed test: each gets RANK/WORLD_SIZE/... in its
// environment, its output goes to a file, and all are killed if they outlive the deadline.
// Also the usual way to run a tool's ranks over Gloo and check that all of them exited alike.
// Leaves out: anything loomrun does beyond that (fail-fast, restarts): the launcher's own tests.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace loom::test {

// A port nobody listens on now (bind to port 0, read it, close).
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

struct WorkerRun {
  std::vector<int> exit_codes;      // -signal when killed by a signal
  std::vector<std::string> output;  // stdout and stderr of each rank
  bool timed_out = false;           // the deadline passed and the survivors were killed
  double seconds = 0;
  std::string summary() const {
    std::ostringstream os;
    for (size_t r = 0; r < output.size(); ++r)
      os << "--- rank " << r << " exit " << exit_codes[r] << "\n" << output[r];
    return os.str();
  }
};

// Runs `program args...` as ranks 0..n-1 of a world of n on 127.0.0.1:port.
inline WorkerRun run_workers(const std::string& program, const std::vector<std::string>& args,
                             int n, int port, const std::map<std::string, std::string>& env,
                             int deadline_s) {
  char dir_template[] = "/tmp/loom-dist-XXXXXX";
  std::string dir = mkdtemp(dir_template);
  std::vector<pid_t> pids;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    std::string log = dir + "/rank" + std::to_string(r) + ".log";
    pid_t pid = fork();
    if (pid == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(program.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      std::perror("execv");
      _exit(127);
    }
    pids.push_back(pid);
  }
  WorkerRun run;
  run.exit_codes.assign(size_t(n), 0);
  std::vector<bool> done(size_t(n), false);
  int left = n;
  auto deadline = start + std::chrono::seconds(deadline_s);
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[size_t(r)]) continue;
      int status = 0;
      if (waitpid(pids[size_t(r)], &status, WNOHANG) == pids[size_t(r)]) {
        done[size_t(r)] = true;
        --left;
        run.exit_codes[size_t(r)] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      run.timed_out = true;
      for (int r = 0; r < n; ++r)
        if (!done[size_t(r)]) kill(pids[size_t(r)], SIGKILL);
      deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < n; ++r) {
    std::string log = dir + "/rank" + std::to_string(r) + ".log";
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    run.output.push_back(ss.str());
    std::remove(log.c_str());
  }
  rmdir(dir.c_str());
  return run;
}

// `program args...` as n Gloo ranks (LOOM_TEST_BACKEND=gloo) on a free port, 240 s at most.
inline WorkerRun run_gloo_workers(const std::string& program, const std::vector<std::string>& args,
                                  int n) {
  return run_workers(program, args, n, free_port(), {{"LOOM_TEST_BACKEND", "gloo"}}, 240);
}

// Every rank of `run` finished in time with exit code `code` (each failure names its rank).
inline void expect_all_exit(const WorkerRun& run, int code) {
  ASSERT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < run.exit_codes.size(); ++r)
    EXPECT_EQ(run.exit_codes[r], code) << "rank " << r << "\n" << run.summary();
}

}  // namespace loom::test
