// TEMPORARY: CPU conv/pool/batch-norm kernels not written yet. Each helper that implements a family deletes its
// entries from here; this file must be gone before the foundation issue is closed.
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

#define LOOM_TODO(name) LOOM_FAIL(name, ": not implemented on the CPU yet")

Tensor CpuBackend::conv2d(const Tensor&, const Tensor&, const Conv2dParams&) { LOOM_TODO("conv2d"); }
Tensor CpuBackend::conv2d_backward_input(const Tensor&, const Tensor&, const Shape&, const Conv2dParams&) { LOOM_TODO("conv2d"); }
Tensor CpuBackend::conv2d_backward_weight(const Tensor&, const Tensor&, const Shape&, const Conv2dParams&) { LOOM_TODO("conv2d"); }
std::pair<Tensor, Tensor> CpuBackend::max_pool2d(const Tensor&, const Pool2dParams&) { LOOM_TODO("max_pool2d"); }
Tensor CpuBackend::max_pool2d_backward(const Tensor&, const Tensor&, const Shape&) { LOOM_TODO("max_pool2d"); }
Tensor CpuBackend::avg_pool2d(const Tensor&, const Pool2dParams&) { LOOM_TODO("avg_pool2d"); }
Tensor CpuBackend::avg_pool2d_backward(const Tensor&, const Shape&, const Pool2dParams&) { LOOM_TODO("avg_pool2d"); }
BatchNormOut CpuBackend::batch_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double, double) { LOOM_TODO("batch_norm"); }
BatchNormGrads CpuBackend::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { LOOM_TODO("batch_norm"); }

}  // namespace loom::cpu
