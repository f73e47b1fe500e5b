// TEMPORARY: CPU softmax/loss/dropout/index kernels not written yet. Each helper that implements a family deletes its
// entries from here; this file must be gone before the foundation issue is closed.
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

#define LOOM_TODO(name) LOOM_FAIL(name, ": not implemented on the CPU yet")

Tensor CpuBackend::softmax(const Tensor&, int64_t, bool) { LOOM_TODO("softmax"); }
Tensor CpuBackend::softmax_backward(const Tensor&, const Tensor&, int64_t, bool) { LOOM_TODO("softmax_backward"); }
Tensor CpuBackend::nll_loss(const Tensor&, const Tensor&, Reduction, int64_t) { LOOM_TODO("nll_loss"); }
Tensor CpuBackend::nll_loss_backward(const Tensor&, const Tensor&, const Tensor&, Reduction, int64_t) { LOOM_TODO("nll_loss_backward"); }
std::pair<Tensor, Tensor> CpuBackend::dropout(const Tensor&, double, uint64_t, uint64_t) { LOOM_TODO("dropout"); }
Tensor CpuBackend::index_select(const Tensor&, int64_t, const Tensor&) { LOOM_TODO("index_select"); }
Tensor CpuBackend::index_add(const Shape&, int64_t, const Tensor&, const Tensor&) { LOOM_TODO("index_add"); }

}  // namespace loom::cpu
