// Copies one worker stream (stdout or stderr) line by line to its sinks: the console with a
// "[rank N] " prefix and/or a log file, keeping the last lines in a ring for failure reports.
// Leaves out: deciding when to read (worker_group.cpp polls the fds).
#pragma once

#include <deque>
#include <string>
#include <vector>

namespace loom::distributed::launcher {

class OutputPump {
 public:
  // Reads from `fd` (non-blocking; the pump closes it). `console_fd` (1 or 2, or -1 for none)
  // gets each line with `prefix` in front; `file_fd` (or -1) gets it as written. The last
  // `keep_lines` lines are kept for tail().
  OutputPump(int fd, std::string prefix, int console_fd, int file_fd, int keep_lines);
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  // Reads what is there now (never blocks); at end of file flushes a last partial line and
  // closes. Returns false once closed.
  bool pump();
  // Reads until the pipe is empty or closed: used once the worker has exited, so everything it
  // wrote is already in the pipe (a child it left behind may still hold the pipe open).
  void drain();
  // The last lines written (without prefix), oldest first.
  std::vector<std::string> tail() const { return {ring_.begin(), ring_.end()}; }

 private:
  void emit(const std::string& line);  // one line, without its '\n'
  void close_fd();

  int fd_;
  std::string prefix_;
  int console_fd_;
  int file_fd_;
  size_t keep_lines_;
  std::string partial_;
  std::deque<std::string> ring_;
};

// write(2) of all of `data` (retrying on EINTR and short writes); errors are ignored (a closed
// console must not stop the supervision).
void write_all(int fd, const std::string& data);

}  // namespace loom::distributed::launcher
