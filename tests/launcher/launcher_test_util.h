// Helpers for loomrun's tests: a temporary folder, a free port, and starting loomrun as a child
// with its output in files, waiting for it with a deadline (a test never hangs).
// Leaves out: the assertions (the test files).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace loom::launcher_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline const std::string kLoomrun = LOOMRUN_BIN;
inline const std::string kWorker = LAUNCH_WORKER_BIN;

// A fresh folder, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "loomrun_test_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline bool exists(const std::string& path) { return fs::exists(path); }

// A process is gone when kill(pid, 0) fails or it is a zombie nobody reaped yet.
inline bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || (close + 2 < stat.size() && stat[close + 2] == 'Z');
}

// Waits until `cond` holds or `seconds` pass; returns whether it held.
template <typename Cond>
bool wait_for(Cond cond, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// loomrun started as a child with stdout and stderr in files of `dir`.
class Loomrun {
 public:
  Loomrun(const std::vector<std::string>& args, const std::string& dir,
          const std::vector<std::string>& extra_env = {}, const std::string& tag = "loomrun")
      : out_path_(dir + "/" + tag + ".out"), err_path_(dir + "/" + tag + ".err") {
    std::vector<std::string> argv{kLoomrun};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(out_path_.c_str(), "w", stdout);
      std::freopen(err_path_.c_str(), "w", stderr);
      for (const auto& kv : extra_env) ::putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
  }
  ~Loomrun() {
    if (!status_) {  // the test failed before it ended: do not leave it running
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  // Waits up to `seconds`; the wait status, or nullopt on timeout (then loomrun is killed).
  std::optional<int> wait(double seconds) {
    if (status_) return status_;
    auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) return status_ = st;
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    status_ = st;
    return std::nullopt;
  }
  // The exit code (or 128 + signal) after wait(); -1 on timeout.
  int run_to_end(double seconds) {
    auto st = wait(seconds);
    if (!st) return -1;
    return WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
  }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  std::optional<int> status_;
};

// Reads the pid files the "sleep"/"fail" workers write, waiting until all `n` exist.
inline std::vector<pid_t> worker_pids(const TempDir& dir, const std::vector<int>& ranks,
                                      double seconds = 20) {
  std::vector<pid_t> pids;
  for (int r : ranks) {
    std::string path = dir / ("pid_" + std::to_string(r));
    if (!wait_for([&] { return exists(path); }, seconds)) return {};
    pids.push_back(std::stoi(read_file(path)));
  }
  return pids;
}

// Key=value lines of a file the "env" worker wrote.
inline std::string env_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  return "<missing>";
}

}  // namespace loom::launcher_test
