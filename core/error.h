// loom::Error and LOOM_CHECK: every failed precondition throws an Error whose message names the
// operation and the offending values, prefixed with file:line.
// Leaves out: CUDA/cuBLAS/cuDNN/NCCL status checks (core/cuda/check.h).
#pragma once

#include <cstdint>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Shapes and other int lists print as [2, 3, 4].
inline std::ostream& operator<<(std::ostream& os, const std::vector<int64_t>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os << ']';
}

// str(a, b, c) streams its arguments into one string.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

}  // namespace loom

// LOOM_CHECK(cond, "conv2d: input ", x.shape(), " has ", c, " channels") throws loom::Error.
#define LOOM_CHECK(cond, ...)                                                       \
  do {                                                                              \
    if (!(cond)) ::loom::throw_error(__FILE__, __LINE__, ::loom::str(__VA_ARGS__)); \
  } while (0)

#define LOOM_FAIL(...) ::loom::throw_error(__FILE__, __LINE__, ::loom::str(__VA_ARGS__))
