// The one CPU backend object (kernels/cpu/cpu_backend.h). Its methods are in the family files.
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

CpuBackend& cpu_backend() {
  static CpuBackend b;
  return b;
}

}  // namespace loom::cpu
