// Fused optimizer steps on CUDA: one kernel launch updates every parameter of the call (for up
// to 256 tensors; more are done in batches of that many). The per-element math is
// kernels/optim_math.h, shared with the CPU loop that tests this kernel.
// With device-side step scalars (Note [Step scalars on the device] in kernels/params.h) each
// kernel reads the learning rate, step count and skip flag itself, and a one-thread kernel after
// it counts the update, so a captured CUDA graph replays a correct step every time.
// Leaves out: f16/bf16 parameters (loom keeps float32 master weights).
#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.cuh"
#include "kernels/optim_math.h"

namespace loom::cuda {

namespace {

// The tables of Note [Multi-tensor table in kernel arguments] (kernels/cuda/multi_tensor.cuh):
// up to 256 tensors of L lists, in chunks of 4096 elements.
template <typename T, int L>
using OptimTable = TensorTable<T, L, 256, 4096>;
static_assert(sizeof(OptimTable<double, 5>) < 30000,
              "the tensor table must fit in the kernel arguments");

// Note [Vector loads in the optimizer kernels]
// The update is memory-bound (Adam reads 4 and writes 3 values per element), so each thread moves
// 16 bytes per array at a time (4 floats or 2 doubles) when every pointer of the tensor is 16-byte
// aligned (chunk starts are multiples of the chunk size, so then every pack is); a chunk's last
// numel % W elements, and tensors that are not aligned, take the scalar loop.
template <typename T>
struct alignas(16) Pack {
  static constexpr int W = 16 / sizeof(T);
  T v[W];
};

__device__ inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p) = v;
}

// The walk of both kernels: for each chunk of the block (Note [Multi-tensor table in kernel
// arguments]), chunk(t, begin, end) with its tensor and element range.
template <typename Table, typename Chunk>
__device__ __forceinline__ void for_each_chunk(const Table& tab, const Chunk& chunk) {
  const int64_t total = tab.chunk_start[tab.n];
  for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
    const auto [t, begin, end] = chunk_range(tab, c);
    chunk(t, begin, end);
  }
}

// Elements [begin, end) of a chunk, the block's threads striding: packs(i) for each pack of W
// from begin when `aligned` (every pointer of the tensor), then one(i) for each element left.
template <int W, typename Packs, typename One>
__device__ __forceinline__ void walk_elements(int64_t begin, int64_t end, bool aligned,
                                              const Packs& packs, const One& one) {
  int64_t scalar_from = begin;
  if (aligned) {
    const int64_t n = (end - begin) / W;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) packs(begin + j * W);
    scalar_from = begin + n * W;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += blockDim.x) one(i);
}

// The device-side scalars as raw pointers (all null for a step with host scalars).
struct DeviceScalars {
  const double* lr = nullptr;
  double* step = nullptr;
  const float* skip_if = nullptr;
};

DeviceScalars device_scalars(const DeviceStepScalars& d) {
  if (!d.defined()) return {};
  return {static_cast<const double*>(d.lr.data_ptr()), static_cast<double*>(d.step.data_ptr()),
          d.skip_if.defined() ? static_cast<const float*>(d.skip_if.data_ptr()) : nullptr};
}

__device__ inline bool skipped(const DeviceScalars& d) { return d.skip_if && *d.skip_if != 0.0f; }

// After every table of a step: count the update unless it was skipped.
__global__ void advance_step_kernel(const DeviceScalars d) {
  if (!skipped(d)) *d.step += 1.0;
}

// Lists: 0 params, 1 grads, 2 exp_avgs, 3 exp_avg_sqs, 4 max_exp_avg_sqs (amsgrad only).
// grad_scale: null, or the one value every gradient is multiplied by (AdamStepParams::grad_scale).
template <typename T>
__global__ void adam_kernel(const __grid_constant__ OptimTable<T, 5> tab, AdamMath<T> math,
                            const DeviceScalars dev, const T* grad_scale) {
  if (dev.lr) {
    if (skipped(dev)) return;
    math = math.at(*dev.lr, *dev.step + 1.0);
  }
  if (grad_scale) math.grad_scale = *grad_scale;
  constexpr int W = Pack<T>::W;
  for_each_chunk(tab, [&](int t, int64_t begin, int64_t end) {
    T* p = tab.ptr[0][t];
    const T* g = tab.ptr[1][t];
    T* m = tab.ptr[2][t];
    T* v = tab.ptr[3][t];
    T* vmax = tab.ptr[4][t];
    const bool aligned =
        aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v) && (!vmax || aligned16(vmax));
    walk_elements<W>(
        begin, end, aligned,
        [&](int64_t i) {
          Pack<T> P = load_pack(p + i), G = load_pack(g + i), M = load_pack(m + i),
                  V = load_pack(v + i), X;
          if (vmax) X = load_pack(vmax + i);
#pragma unroll
          for (int k = 0; k < W; ++k)
            math(P.v[k], G.v[k], M.v[k], V.v[k], vmax ? &X.v[k] : nullptr);
          store_pack(p + i, P);
          store_pack(m + i, M);
          store_pack(v + i, V);
          if (vmax) store_pack(vmax + i, X);
        },
        [&](int64_t i) { math(p[i], g[i], m[i], v[i], vmax ? vmax + i : nullptr); });
  });
}

// Lists: 0 params, 1 grads, 2 momentum buffers (null without momentum).
template <typename T>
__global__ void sgd_kernel(const __grid_constant__ OptimTable<T, 3> tab, SgdMath<T> math,
                           const DeviceScalars dev) {
  if (dev.lr) {
    if (skipped(dev)) return;
    math = math.at(*dev.lr, *dev.step);
  }
  constexpr int W = Pack<T>::W;
  for_each_chunk(tab, [&](int t, int64_t begin, int64_t end) {
    T* p = tab.ptr[0][t];
    const T* g = tab.ptr[1][t];
    T* buf = tab.ptr[2][t];
    walk_elements<W>(
        begin, end, aligned16(p) && aligned16(g) && (!buf || aligned16(buf)),
        [&](int64_t i) {
          Pack<T> P = load_pack(p + i), G = load_pack(g + i), B;
          if (buf) B = load_pack(buf + i);
#pragma unroll
          for (int k = 0; k < W; ++k) math(P.v[k], G.v[k], buf ? &B.v[k] : nullptr);
          store_pack(p + i, P);
          if (buf) store_pack(buf + i, B);
        },
        [&](int64_t i) { math(p[i], g[i], buf ? buf + i : nullptr); });
  });
}

// The launches of one fused step, on the parameters' (lists[0]) device and stream: kernel(tab,
// grid, stream) for each table of the lists, then the device-side step count advanced (a
// capturable step's); launch errors name the step.
template <typename Table, typename Kernel>
void launch_step(const std::vector<const std::vector<Tensor>*>& lists, const DeviceScalars& ds,
                 const char* step, const Kernel& kernel) {
  int dev = (*lists[0])[0].device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  for_each_table<Table>(lists, [&](const Table& tab, int64_t chunks) {
    kernel(tab, unsigned(grid_for_chunks(chunks, dev)), s);
    LOOM_CUDA_CHECK_LAUNCH(step);
  });
  if (ds.step) {
    advance_step_kernel<<<1, 1, 0, s>>>(ds);
    LOOM_CUDA_CHECK_LAUNCH(step);
  }
}

const std::vector<Tensor> kNoTensors;  // an absent state list (no amsgrad, no momentum)

template <typename T>
void adam_launch(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& m, const std::vector<Tensor>& v,
                 const std::vector<Tensor>& vmax, const AdamStepParams& hp) {
  const auto math = AdamMath<T>::make(hp);
  const DeviceScalars ds = device_scalars(hp.on_device);
  const T* grad_scale = data_or_null<T>(hp.grad_scale);
  launch_step<OptimTable<T, 5>>(
      {&params, &grads, &m, &v, hp.amsgrad ? &vmax : &kNoTensors}, ds, "adam_step",
      [&](const OptimTable<T, 5>& tab, unsigned grid, cudaStream_t s) {
        adam_kernel<T><<<grid, kBlockSize, 0, s>>>(tab, math, ds, grad_scale);
      });
}

template <typename T>
void sgd_launch(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& bufs, const SgdStepParams& hp) {
  const auto math = SgdMath<T>::make(hp);
  const DeviceScalars ds = device_scalars(hp.on_device);
  launch_step<OptimTable<T, 3>>({&params, &grads, hp.momentum != 0.0 ? &bufs : &kNoTensors}, ds,
                                "sgd_step",
                                [&](const OptimTable<T, 3>& tab, unsigned grid, cudaStream_t s) {
                                  sgd_kernel<T><<<grid, kBlockSize, 0, s>>>(tab, math, ds);
                                });
}

}  // namespace

// Note [The path of a fused step] (kernels/optim_math.h): fused_adam_step and fused_sgd_step run
// the shared checks and the dtype switch, then adam_launch / sgd_launch above.
void CudaBackend::adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& exp_avgs,
                            const std::vector<Tensor>& exp_avg_sqs,
                            const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& hp) {
  fused_adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp, [&](auto t) {
    adam_launch<decltype(t)>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp);
  });
}

void CudaBackend::sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& momentum_bufs, const SgdStepParams& hp) {
  fused_sgd_step(params, grads, momentum_bufs, hp,
                 [&](auto t) { sgd_launch<decltype(t)>(params, grads, momentum_bufs, hp); });
}

}  // namespace loom::cuda
