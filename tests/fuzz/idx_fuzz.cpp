// libFuzzer harness: the idx reader (data/mnist.h, read_idx_u8) on arbitrary files, gzip or
// plain (zlib's gzread reads both; the seeds hold both kinds). The first input byte picks the
// expected number of dims (1-4); the rest is written to a file and read back. Every input must
// load or throw loom::Error. Leaves out: the MNIST datasets built on top (their own tests).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "data/mnist.h"

namespace {
std::string scratch_path() {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/loom-idx-fuzz-" + std::to_string(getpid());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string path = scratch_path();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 1 && std::fwrite(data + 1, 1, size - 1, f) != size - 1) std::abort();
  std::fclose(f);
  int ndim = 1 + data[0] % 4;
  try {
    loom::Tensor t = loom::data::read_idx_u8(path, ndim, "idx_fuzz");
    if (t.dim() != ndim) std::abort();
  } catch (const loom::Error&) {
  }
  unlink(path.c_str());
  return 0;
}
