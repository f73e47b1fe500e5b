// The GradScaler kernels on CUDA: one launch unscales every gradient of the call and flags
// inf/NaN into found_inf (Note [Fused unscale]), and a one-thread kernel updates the scale; both
// read the scale from device memory, so neither syncs with the host and a CUDA graph can hold them.
// Leaves out: f16/bf16 gradients; float32 and float64 gradients in one call take one launch each.
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/amp_math.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace loom::cuda {

namespace {

// The gradients travel in GradTables (Note [Multi-tensor table in kernel arguments] in
// kernels/cuda/multi_tensor.cuh).
template <typename T>
__global__ void unscale_kernel(const __grid_constant__ GradTable<T> tab, float* found_inf,
                               const float* scale) {
  const T inv = T(1.0f / *scale);
  const int64_t total = tab.chunk_start[tab.n];
  bool found = false;
  for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
    const auto [t, begin, end] = chunk_range(tab, c);
    T* p = tab.ptr[0][t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      T v = p[i];
      found |= non_finite(v);
      p[i] = v * inv;
    }
  }
  if (__syncthreads_or(found) && threadIdx.x == 0) *found_inf = 1.0f;
}

__global__ void update_scale_kernel(float* scale, int32_t* tracker, const float* found_inf,
                                    float growth, float backoff, int32_t interval) {
  update_scale(*scale, *tracker, *found_inf != 0.0f, growth, backoff, interval);
}

template <typename T>
void unscale_launch(const std::vector<Tensor>& grads, const Tensor& found_inf,
                    const Tensor& scale) {
  const int dev = found_inf.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  for_each_table<GradTable<T>>({&grads}, [&](const GradTable<T>& tab, int64_t chunks) {
    unscale_kernel<T><<<unsigned(grid_for_chunks(chunks, dev)), kBlockSize, 0, s>>>(
        tab, found_inf.data<float>(), scale.data<float>());
    LOOM_CUDA_CHECK_LAUNCH("amp_unscale_");
  });
}

}  // namespace

void CudaBackend::amp_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                               const Tensor& scale) {
  check_unscale_args(grads, found_inf, scale);
  unscale_launch<float>(grads, found_inf, scale);
  unscale_launch<double>(grads, found_inf, scale);
}

void CudaBackend::amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker,
                                    const Tensor& found_inf, double growth, double backoff,
                                    int64_t interval) {
  check_update_scale_args(scale, growth_tracker, found_inf, interval);
  const int dev = scale.device().index;
  DeviceGuard guard(dev);
  update_scale_kernel<<<1, 1, 0, current_stream(dev)>>>(
      scale.data<float>(), growth_tracker.data<int32_t>(), found_inf.data<float>(), float(growth),
      float(backoff), int32_t(interval));
  LOOM_CUDA_CHECK_LAUNCH("amp_update_scale_");
}

}  // namespace loom::cuda
