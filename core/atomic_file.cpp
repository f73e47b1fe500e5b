// AtomicFileWriter on POSIX: open/write/fsync/rename/fsync(dir).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace loom {

namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string atomic_temp_path(const std::string& path, long pid) {
  return path + ".tmp." + std::to_string(pid);
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temp_(atomic_temp_path(path_, long(::getpid()))) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_CHECK(fd_ >= 0, "writing '", path_, "': cannot create the temporary file '", temp_,
             "': ", errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  LOOM_CHECK(fd_ >= 0 && !committed_, "writing '", path_, "': the file was already committed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    LOOM_CHECK(w > 0, "writing '", path_, "': write to '", temp_, "' failed: ", errno_text());
    p += w;
    n -= size_t(w);
  }
}

void AtomicFileWriter::commit() {
  LOOM_CHECK(fd_ >= 0 && !committed_, "writing '", path_, "': the file was already committed");
  LOOM_CHECK(::fsync(fd_) == 0, "writing '", path_, "': fsync of '", temp_,
             "' failed: ", errno_text());
  int rc = ::close(fd_);
  fd_ = -1;
  LOOM_CHECK(rc == 0, "writing '", path_, "': close of '", temp_, "' failed: ", errno_text());
  LOOM_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0, "writing '", path_, "': rename from '",
             temp_, "' failed: ", errno_text());
  committed_ = true;
  // The rename is durable only once the folder's entry is on disk.
  std::string dir = parent_dir(path_);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  LOOM_CHECK(dfd >= 0, "writing '", path_, "': cannot open folder '", dir,
             "' to fsync it: ", errno_text());
  int frc = ::fsync(dfd);
  ::close(dfd);
  LOOM_CHECK(frc == 0, "writing '", path_, "': fsync of folder '", dir, "' failed: ", errno_text());
}

}  // namespace loom
