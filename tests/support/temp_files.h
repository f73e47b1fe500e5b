// Temporary folders and whole-file reads and writes for tests that save and load files
// (safetensors, checkpoints). Leaves out: anything the library itself should do (atomic writes
// are core/atomic_file.h).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace loom::test {

// A fresh folder under $TMPDIR, removed with everything in it at the end of the scope.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "loom_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

// The whole file as bytes ("" when it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Replaces the file with `bytes` (not atomically: tests use it to plant corrupt files).
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace loom::test
