// The CPU backend: Eigen for matrix products, the strided iterator of kernels/cpu/loops.h for
// elementwise math, plain loops elsewhere, all parallel over one OpenMP pool.
// Its methods are defined in one file per family: cpu_elementwise.cpp, cpu_reduce.cpp,
// cpu_linalg.cpp, cpu_softmax_loss.cpp, cpu_conv.cpp, cpu_pool.cpp, cpu_norm.cpp,
// cpu_norm_pool.cpp, cpu_index.cpp, cpu_optim.cpp, cpu_amp.cpp.
// Leaves out: BLAS libraries (Eigen's GEMM is the CPU reference and fast enough to match them).
#pragma once

#include "kernels/backend.h"

namespace loom::cpu {

class CpuBackend final : public Backend {
 public:
  // The overrides of every method of kernels/backend_methods.inc.
#define LOOM_BACKEND_METHOD(R, name, params) R name params override;
#include "kernels/backend_methods.inc"
#undef LOOM_BACKEND_METHOD
};

CpuBackend& cpu_backend();

}  // namespace loom::cpu
