// Names of the elementwise ops, for error messages.
#include "kernels/functors.h"

#include <cctype>
#include <string>

namespace loom {

namespace {
// "ReluBackward" -> "relu_backward"
std::string snake(const char* camel) {
  std::string s;
  for (const char* p = camel; *p; ++p) {
    if (std::isupper(static_cast<unsigned char>(*p))) {
      if (p != camel) s += '_';
      s += char(std::tolower(static_cast<unsigned char>(*p)));
    } else {
      s += *p;
    }
  }
  return s;
}
}  // namespace

const char* op_name(UnaryOp op) {
#define LOOM_NAME(n) snake(#n),
  static const std::string names[] = {LOOM_UNARY_OPS(LOOM_NAME)};
  return names[int(op)].c_str();
}

const char* op_name(BinaryOp op) {
  static const std::string names[] = {LOOM_BINARY_OPS(LOOM_NAME)};
#undef LOOM_NAME
  return names[int(op)].c_str();
}

bool returns_bool(BinaryOp op) {
  switch (op) {
#define LOOM_CASE(n) \
  case BinaryOp::n:  \
    return n##Op::returns_bool;
    LOOM_BINARY_OPS(LOOM_CASE)
#undef LOOM_CASE
  }
  return false;
}

}  // namespace loom
