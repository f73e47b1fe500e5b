// TEMPORARY: CPU kernels not written yet. Each helper that implements a family deletes its
// entries from here; this file must be gone before the foundation issue is closed.
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

#define LOOM_TODO(name) LOOM_FAIL(name, ": not implemented on the CPU yet")

Tensor CpuBackend::softmax(const Tensor&, int64_t, bool) { LOOM_TODO("softmax"); }
Tensor CpuBackend::softmax_backward(const Tensor&, const Tensor&, int64_t, bool) { LOOM_TODO("softmax_backward"); }
Tensor CpuBackend::nll_loss(const Tensor&, const Tensor&, Reduction, int64_t) { LOOM_TODO("nll_loss"); }
Tensor CpuBackend::nll_loss_backward(const Tensor&, const Tensor&, const Tensor&, Reduction, int64_t) { LOOM_TODO("nll_loss_backward"); }
Tensor CpuBackend::conv2d(const Tensor&, const Tensor&, const Conv2dParams&) { LOOM_TODO("conv2d"); }
Tensor CpuBackend::conv2d_backward_input(const Tensor&, const Tensor&, const Shape&, const Conv2dParams&) { LOOM_TODO("conv2d"); }
Tensor CpuBackend::conv2d_backward_weight(const Tensor&, const Tensor&, const Shape&, const Conv2dParams&) { LOOM_TODO("conv2d"); }
std::pair<Tensor, Tensor> CpuBackend::max_pool2d(const Tensor&, const Pool2dParams&) { LOOM_TODO("max_pool2d"); }
Tensor CpuBackend::max_pool2d_backward(const Tensor&, const Tensor&, const Shape&) { LOOM_TODO("max_pool2d"); }
Tensor CpuBackend::avg_pool2d(const Tensor&, const Pool2dParams&) { LOOM_TODO("avg_pool2d"); }
Tensor CpuBackend::avg_pool2d_backward(const Tensor&, const Shape&, const Pool2dParams&) { LOOM_TODO("avg_pool2d"); }
BatchNormOut CpuBackend::batch_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double, double) { LOOM_TODO("batch_norm"); }
BatchNormGrads CpuBackend::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { LOOM_TODO("batch_norm"); }
std::pair<Tensor, Tensor> CpuBackend::dropout(const Tensor&, double, uint64_t, uint64_t) { LOOM_TODO("dropout"); }
Tensor CpuBackend::index_select(const Tensor&, int64_t, const Tensor&) { LOOM_TODO("index_select"); }
Tensor CpuBackend::index_add(const Shape&, int64_t, const Tensor&, const Tensor&) { LOOM_TODO("index_add"); }

}  // namespace loom::cpu
