// The one place errors are built: "<message> (at core/shape.cpp:42)".
#include "core/error.h"

#include <cstring>

namespace loom {

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
  // Show the path from the project root, not the build machine's absolute path.
  const char* rel = file;
  for (const char* floor : {"core/", "kernels/", "autograd/", "nn/", "data/", "distributed/"}) {
    if (const char* p = std::strstr(file, floor)) { rel = p; break; }
  }
  throw Error(msg + " (at " + rel + ":" + std::to_string(line) + ")");
}

}  // namespace loom
