// Line-buffered copying of worker output; see output_pump.h.
#include "distributed/launcher/output_pump.h"

#include <unistd.h>

#include <cerrno>

namespace loom::distributed::launcher {

// A line longer than this is cut and emitted in pieces (a worker printing a megabyte without a
// newline must not grow loomrun's memory without bound).
constexpr size_t kMaxLine = 64 * 1024;

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

OutputPump::OutputPump(int fd, std::string prefix, int console_fd, int file_fd, int keep_lines)
    : fd_(fd),
      prefix_(std::move(prefix)),
      console_fd_(console_fd),
      file_fd_(file_fd),
      keep_lines_(static_cast<size_t>(keep_lines)) {}

OutputPump::~OutputPump() {
  close_fd();
  if (file_fd_ >= 0) ::close(file_fd_);
}

void OutputPump::close_fd() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
}

void OutputPump::emit(const std::string& line) {
  // One write per line, so lines of different ranks interleave whole, never mid-line.
  if (console_fd_ >= 0) write_all(console_fd_, prefix_ + line + "\n");
  if (file_fd_ >= 0) write_all(file_fd_, line + "\n");
  if (keep_lines_ == 0) return;
  ring_.push_back(line);
  if (ring_.size() > keep_lines_) ring_.pop_front();
}

bool OutputPump::pump() {
  if (fd_ < 0) return false;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {  // end of file (or a read error: treat as the end)
      if (!partial_.empty()) emit(partial_);
      partial_.clear();
      close_fd();
      return false;
    }
    partial_.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(partial_.substr(start, nl - start));
    partial_.erase(0, start);
    while (partial_.size() >= kMaxLine) {
      emit(partial_.substr(0, kMaxLine));
      partial_.erase(0, kMaxLine);
    }
  }
}

void OutputPump::drain() {
  if (pump()) {  // pipe empty but still open: flush the partial line, stop reading it
    if (!partial_.empty()) emit(partial_);
    partial_.clear();
    close_fd();
  }
}

}  // namespace loom::distributed::launcher
