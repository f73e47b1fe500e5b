// The one place errors are built: "<message> (at core/shape.cpp:42)".
#include "core/error.h"

#include <cstring>

namespace loom {

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
  // Show the path from the repository root, not the build machine's absolute path: strip the
  // source root CMake passes in; for a file compiled from elsewhere, start at the first top-level
  // folder of the repository in the path.
  const char* rel = file;
#ifdef LOOM_SOURCE_ROOT
  const size_t root_len = std::strlen(LOOM_SOURCE_ROOT);
  if (std::strncmp(file, LOOM_SOURCE_ROOT, root_len) == 0) {
    rel = file + root_len;
  } else
#endif
  {
    const char* first = nullptr;
    for (const char* top : {"core/", "kernels/", "autograd/", "nn/", "data/", "distributed/",
                            "examples/", "benchmarks/", "tests/"}) {
      const char* p = std::strstr(file, top);
      if (p && (p == file || p[-1] == '/') && (!first || p < first)) first = p;
    }
    if (first) rel = first;
  }
  throw Error(msg + " (at " + rel + ":" + std::to_string(line) + ")");
}

}  // namespace loom
