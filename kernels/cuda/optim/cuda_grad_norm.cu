// The fused gradient norm on CUDA (Note [Fused gradient norm] in kernels/backend_methods.inc):
// sum_of_squares is one multi-tensor launch (kernels/cuda/multi_tensor.cuh) in which each chunk
// of 8192 elements writes its own partial sum (double), then one block adds the partials in a
// fixed order: the same bits whatever the grid, and no atomics. scale_by_ is one multi-tensor
// launch reading the factor from device memory (a CUDA graph captures both as they are).
// scale_by_ also takes float16/bfloat16 lists (a float32 factor); sum_of_squares does not
// (gradients of float32 master weights are float32).
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace loom::cuda {

namespace {

// partial[first + c] = sum of squares of chunk c of the table (block-uniform loop: every thread
// reaches block_reduce).
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    chunk_squares_kernel(const __grid_constant__ GradTable<T> tab, double* partial, int64_t first) {
  const int64_t total = tab.chunk_start[tab.n];
  for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
    const auto [t, begin, end] = chunk_range(tab, c);
    const T* p = tab.ptr[0][t];
    double s = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      s += double(p[i]) * double(p[i]);
    s = block_reduce(s, Plus{}, 0.0);
    if (threadIdx.x == 0) partial[first + c] = s;
  }
}

// out[0] = the sum of partial[0, n), in one block, in a fixed order.
template <typename T>
__global__ void __launch_bounds__(1024)
    add_partials_kernel(const double* partial, int64_t n, T* out) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_reduce(s, Plus{}, 0.0);
  if (threadIdx.x == 0) *out = T(s);
}

// p *= f, computed in F (T itself, or float for 16-bit T) and rounded once to T.
template <typename T, typename F>
__global__ void __launch_bounds__(kBlockSize)
    scale_kernel(const __grid_constant__ GradTable<T> tab, const F* factor) {
  const F f = *factor;
  const int64_t total = tab.chunk_start[tab.n];
  for (int64_t c = blockIdx.x; c < total; c += gridDim.x) {
    const auto [t, begin, end] = chunk_range(tab, c);
    T* p = tab.ptr[0][t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) p[i] = T(F(p[i]) * f);
  }
}

template <typename T>
int64_t chunks_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += (t.numel() + GradTable<T>::kChunk - 1) / GradTable<T>::kChunk;
  return n;
}

template <typename T>
Tensor sum_of_squares_as(const std::vector<Tensor>& tensors, Device d) {
  const int dev = d.index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  Tensor out = empty({}, {.dtype = DTypeOf<T>::value, .device = d});
  const int64_t n = chunks_of<T>(tensors);
  Tensor partial = empty({std::max<int64_t>(n, 1)}, {.dtype = DType::F64, .device = d});
  int64_t first = 0;  // each table's chunks follow the previous table's
  for_each_table<GradTable<T>>({&tensors}, [&](const GradTable<T>& tab, int64_t chunks) {
    chunk_squares_kernel<T><<<unsigned(grid_for_chunks(chunks, dev)), kBlockSize, 0, s>>>(
        tab, partial.data<double>(), first);
    LOOM_CUDA_CHECK_LAUNCH("sum_of_squares");
    first += chunks;
  });
  add_partials_kernel<T><<<1, 1024, 0, s>>>(partial.data<double>(), first, out.data<T>());
  LOOM_CUDA_CHECK_LAUNCH("sum_of_squares (partials)");
  return out;
}

}  // namespace

// tensors: contiguous, one dtype (f32/f64) -> 0-d of that dtype
Tensor CudaBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  LOOM_CHECK(!tensors.empty() && tensors[0].defined(),
             "sum_of_squares: expected a non-empty list of CUDA tensors");
  const Device d = tensors[0].device();
  const DType dt = check_norm_list("sum_of_squares", tensors, d);
  return dt == DType::F64 ? sum_of_squares_as<double>(tensors, d)
                          : sum_of_squares_as<float>(tensors, d);
}

// every tensor *= factor (0-d, the tensors' dtype or float32 for 16-bit ones, on their device)
void CudaBackend::scale_by_(const std::vector<Tensor>& tensors, const Tensor& factor) {
  if (tensors.empty()) return;
  const Device d = tensors[0].defined() ? tensors[0].device() : factor.device();
  const DType dt = check_norm_list("scale_by_", tensors, d, /*allow_16bit=*/true);
  check_scale_factor(factor, dt, d);
  const int dev = d.index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  auto launch = [&](auto type_tag, auto factor_tag) {
    using T = decltype(type_tag);
    using F = decltype(factor_tag);
    for_each_table<GradTable<T>>({&tensors}, [&](const GradTable<T>& tab, int64_t chunks) {
      scale_kernel<T, F>
          <<<unsigned(grid_for_chunks(chunks, dev)), kBlockSize, 0, s>>>(tab, factor.data<F>());
      LOOM_CUDA_CHECK_LAUNCH("scale_by_");
    });
  };
  if (dt == DType::F64)
    launch(double{}, double{});
  else if (dt == DType::F32)
    launch(float{}, float{});
  else if (dt == DType::BF16)
    launch(BFloat16{}, float{});
  else
    launch(Half{}, float{});
}

}  // namespace loom::cuda
