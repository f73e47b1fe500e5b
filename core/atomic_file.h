// AtomicFileWriter: writes a file so that a crash or kill at any moment leaves at `path` either
// the previous file or the complete new one, never a partial one (temp file, fsync, rename, fsync
// of the folder). Leaves out: locking between concurrent writers of the same path (loom saves
// checkpoints from rank 0 only) and non-POSIX systems.
#pragma once

#include <cstddef>
#include <string>

namespace loom {

class AtomicFileWriter {
 public:
  // Creates "<path>.tmp.<pid>" (replacing a stale one of that name).
  explicit AtomicFileWriter(std::string path);
  // Without commit(), removes the temporary file: the target is never touched.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // all n bytes, or an Error naming the file
  // fsync the file, close it, rename it over the target, fsync the folder.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The temporary name AtomicFileWriter uses for `path` in process `pid`.
std::string atomic_temp_path(const std::string& path, long pid);

}  // namespace loom
