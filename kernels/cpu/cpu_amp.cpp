// The GradScaler kernels on the CPU: unscale every gradient while looking for inf/NaN, and the
// loss-scale update. The reference the CUDA kernels are tested against.
// Leaves out: f16/bf16 gradients (parameters, hence gradients, stay float32 under autocast).
#include <atomic>

#include "core/parallel.h"
#include "kernels/amp_math.h"
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

namespace {

template <typename T>
bool unscale_one(const Tensor& g, T inv) {
  T* p = g.data<T>();
  std::atomic<bool> found{false};
  parallel_for(0, g.numel(), kGrainSize, [&](int64_t b, int64_t e) {
    bool f = false;
    for (int64_t i = b; i < e; ++i) {
      f |= non_finite(p[i]);
      p[i] *= inv;
    }
    if (f) found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}

}  // namespace

void CpuBackend::amp_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                              const Tensor& scale) {
  check_unscale_args(grads, found_inf, scale);
  const float inv = 1.0f / *scale.data<float>();
  bool found = false;
  for (const Tensor& g : grads)
    found |=
        g.dtype() == DType::F64 ? unscale_one<double>(g, double(inv)) : unscale_one<float>(g, inv);
  if (found) *found_inf.data<float>() = 1.0f;
}

void CpuBackend::amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                   const Tensor& found_inf, double growth, double backoff,
                                   int64_t interval) {
  check_update_scale_args(scale, growth_tracker, found_inf, interval);
  update_scale(*scale.data<float>(), *growth_tracker.data<int32_t>(),
               *found_inf.data<float>() != 0.0f, float(growth), float(backoff), int32_t(interval));
}

}  // namespace loom::cpu
