// A worker for loomrun's tests: does one scripted thing per mode (write its environment, fail on
// one rank, sleep until signalled, fail once then succeed), reading RANK etc. like a real worker.
// Leaves out: any real work; every mode ends by itself within a minute (alarm) so none is left
// over.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "core/error.h"
#include "distributed/store/tcp_store.h"

static std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

static int rank() { return std::atoi(env("RANK").c_str()); }

static std::string g_dir;

static void touch(const std::string& path, const std::string& text = "") {
  std::ofstream(path) << text;
}

// The files on_signal writes, "<dir>/got_<SIG>_<rank>", named before the handler is installed.
static std::string g_got_term, g_got_int;

// Writes g_got_<sig> and exits 128+sig: proves the worker saw the signal. Only async-signal-safe
// calls here (open, close, _exit): no allocation, no getenv (ThreadSanitizer checks this).
static void on_signal(int sig) {
  const char* path = sig == SIGTERM ? g_got_term.c_str() : g_got_int.c_str();
  int fd = ::open(path, O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) ::close(fd);
  ::_exit(128 + sig);
}

// Writes the pid file, then waits for signals (SIGTERM/SIGINT handled unless ignore_term).
[[noreturn]] static void wait_forever(bool ignore_term) {
  if (ignore_term) {
    ::signal(SIGTERM, SIG_IGN);
  } else {
    g_got_term = g_dir + "/got_TERM_" + std::to_string(rank());
    g_got_int = g_dir + "/got_INT_" + std::to_string(rank());
    ::signal(SIGTERM, on_signal);
    ::signal(SIGINT, on_signal);
  }
  touch(g_dir + "/pid_" + std::to_string(rank()) + ".tmp", std::to_string(::getpid()));
  std::rename((g_dir + "/pid_" + std::to_string(rank()) + ".tmp").c_str(),
              (g_dir + "/pid_" + std::to_string(rank())).c_str());
  for (;;) ::pause();
}

int main(int argc, char** argv) {
  ::alarm(60);  // no test worker outlives a minute, whatever happens to its launcher
  if (argc < 3) {
    std::cerr << "usage: launch_worker_tool MODE DIR [RANK [CODE]]\n";
    return 64;
  }
  std::string mode = argv[1];
  g_dir = argv[2];
  int target = argc > 3 ? std::atoi(argv[3]) : 0;
  int code = argc > 4 ? std::atoi(argv[4]) : 3;

  if (mode == "env") {  // every variable loomrun sets, one KEY=VALUE line each
    std::ofstream f(g_dir + "/env_" + env("RANK"));
    for (const char* k : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                          "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOOM_RESTART_COUNT",
                          "LOOM_MAX_RESTARTS", "NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS",
                          "TORCH_SYMM_MEM_DISABLE_MULTICAST", "OMP_NUM_THREADS", "LOOM_TEST_MARK",
                          "LOOM_STORE_EXTERNAL", "TORCHELASTIC_USE_AGENT_STORE"})
      f << k << "=" << env(k) << "\n";
    std::cout << "hello from rank " << rank() << "\nsecond line of rank " << rank() << std::endl;
    std::cerr << "stderr of rank " << rank() << std::endl;
    return 0;
  }
  if (mode == "sleep") wait_forever(false);       // until signalled
  if (mode == "ignore-term") wait_forever(true);  // only SIGKILL stops it
  if (mode == "fail" || mode == "throw") {        // rank `target` fails, the others wait
    if (rank() != target) wait_forever(false);
    // Fail only once every other rank is up (their pid files exist): the test sees them stopped.
    int world = std::atoi(env("WORLD_SIZE").c_str());
    for (int r = 0, tries = 0; r < world && tries < 2000; ++tries) {
      if (r == rank() || ::access((g_dir + "/pid_" + std::to_string(r)).c_str(), F_OK) == 0)
        ++r;
      else
        ::usleep(10 * 1000);
    }
    std::cerr << "worker " << rank() << ": about to fail" << std::endl;
    if (mode == "throw")
      throw loom::Error("launch_worker_tool: deliberate error on rank " + env("RANK"));
    std::cerr << "worker " << rank() << ": deliberate exit " << code << std::endl;
    return code;
  }
  if (mode == "fail-once") {  // rank `target` fails in the first attempt only (a marker file)
    std::string marker = g_dir + "/failed_once";
    if (rank() == target && ::access(marker.c_str(), F_OK) != 0) {
      touch(marker);
      std::cerr << "worker " << rank() << ": failing once" << std::endl;
      return code;
    }
    if (env("LOOM_RESTART_COUNT") == "0") wait_forever(false);
    touch(g_dir + "/ok_" + env("RANK") + "_attempt_" + env("LOOM_RESTART_COUNT"));
    return 0;
  }
  if (mode == "store-once") {
    // Connects to the store loomrun serves (as a client only), counts arrivals, and has rank
    // `target` fail in the first attempt. A fresh store per attempt: every count <= WORLD_SIZE.
    loom::distributed::TCPStoreOptions so;
    so.timeout = std::chrono::seconds(20);
    loom::distributed::TCPStore store(env("MASTER_ADDR"), std::atoi(env("MASTER_PORT").c_str()),
                                      so);
    int64_t arrival = store.add("arrivals", 1);
    touch(g_dir + "/arrival_" + env("RANK") + "_attempt_" + env("LOOM_RESTART_COUNT"),
          std::to_string(arrival));
    store.set("written_" + env("RANK"), std::string("1"));
    if (rank() == target && env("LOOM_RESTART_COUNT") == "0") {
      std::vector<std::string> all;  // fail only once every rank has written its file
      for (int r = 0; r < std::atoi(env("WORLD_SIZE").c_str()); ++r)
        all.push_back("written_" + std::to_string(r));
      store.wait(all, std::chrono::seconds(20));
      std::cerr << "worker " << rank() << ": failing in attempt 0" << std::endl;
      return code;
    }
    if (env("LOOM_RESTART_COUNT") == "0") wait_forever(false);
    return 0;
  }
  std::cerr << "launch_worker_tool: unknown mode " << mode << "\n";
  return 64;
}
