// The per-element math of the GradScaler kernels (Backend::amp_unscale_ / amp_update_scale_),
// written once for the CPU loop (kernels/cpu/cpu_amp.cpp) and the CUDA kernels
// (kernels/cuda/elementwise/cuda_amp.cu), plus the argument checks both backends run.
// Leaves out: the loops (each backend has its own) and the GradScaler itself (nn/amp/).
#pragma once

#include <cstdint>
#include <vector>

#include "core/macros.h"
#include "core/tensor.h"

namespace loom {

// True for inf and NaN (x - x is NaN exactly then), without <cmath> on the device.
template <typename T>
LOOM_HOST_DEVICE inline bool non_finite(T x) {
  return !(x - x == T(0));
}

// One step of the loss-scale schedule (Note [Fused unscale] in kernels/backend_methods.inc).
LOOM_HOST_DEVICE inline void update_scale(float& scale, int32_t& tracker, bool found_inf,
                                          float growth, float backoff, int32_t interval) {
  if (found_inf) {
    scale *= backoff;
    tracker = 0;
    return;
  }
  int32_t t = tracker + 1;
  if (t >= interval) {
    float grown = scale * growth;
    if (!non_finite(grown)) scale = grown;  // never grow into inf
    t = 0;
  }
  tracker = t;
}

inline void check_scalar_state(const char* op, const Tensor& t, DType dt, const Device& dev,
                               const char* what) {
  LOOM_CHECK(
      t.defined() && t.dtype() == dt && t.numel() == 1 && t.device() == dev && t.is_contiguous(),
      op, ": ", what, " must be a one-element ", dtype_name(dt), " tensor on ", dev, ", got ",
      t.defined() ? describe(t) : std::string("undefined"));
}

inline void check_unscale_args(const std::vector<Tensor>& grads, const Tensor& found_inf,
                               const Tensor& scale) {
  LOOM_CHECK(found_inf.defined(), "amp_unscale_: found_inf is undefined");
  const Device dev = found_inf.device();
  check_scalar_state("amp_unscale_", found_inf, DType::F32, dev, "found_inf");
  check_scalar_state("amp_unscale_", scale, DType::F32, dev, "scale");
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    LOOM_CHECK(g.defined() && (g.dtype() == DType::F32 || g.dtype() == DType::F64) &&
                   g.device() == dev && g.is_contiguous(),
               "amp_unscale_: gradient ", i, " (",
               g.defined() ? describe(g) : std::string("undefined"),
               ") must be a contiguous float32 or float64 tensor on ", dev);
  }
}

inline void check_update_scale_args(const Tensor& scale, const Tensor& tracker,
                                    const Tensor& found_inf, int64_t interval) {
  LOOM_CHECK(scale.defined(), "amp_update_scale_: scale is undefined");
  const Device dev = scale.device();
  check_scalar_state("amp_update_scale_", scale, DType::F32, dev, "scale");
  check_scalar_state("amp_update_scale_", tracker, DType::I32, dev, "growth_tracker");
  check_scalar_state("amp_update_scale_", found_inf, DType::F32, dev, "found_inf");
  LOOM_CHECK(interval >= 1 && interval <= INT32_MAX,
             "amp_update_scale_: growth_interval must be in [1, 2^31), got ", interval);
}

}  // namespace loom
