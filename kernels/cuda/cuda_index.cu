// CUDA indexing kernels: index_select, its adjoint index_add (atomic adds, so repeated indices
// accumulate), and dropout, whose mask comes from the same Philox draws as the CPU's (see
// Note [Dropout mask] in kernels/cpu/cpu_index.cpp): the same seed gives the same mask.
// index_select moves elements as opaque words of their size (one kernel per size, not per dtype).
// Leaves out: a deterministic index_add (atomics add repeated indices in any order).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/check.h"
#include "core/cuda/device_error.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// out: (outer, K, inner) <- x: (outer, n, inner) at the K indices.
template <typename W>
__global__ void __launch_bounds__(kBlockSize)
    index_select_kernel(const W* x, W* out, const int64_t* index, int64_t is, int64_t outer,
                        int64_t n, int64_t K, int64_t inner, DeviceErrorSlot* err) {
  const int64_t total = outer * K * inner, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t c = e % inner, r = e / inner, k = r % K, o = r / K;
    const int64_t idx = index[k * is];
    if (idx < 0 || idx >= n) {
      if (c == 0 && o == 0) report_device_error(err, DeviceOp::IndexSelect, idx, k, n);
      out[e] = W(0);
    } else {
      out[e] = x[(o * n + idx) * inner + c];
    }
  }
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(Half* p, Half v) {
  atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.bits));
}
__device__ __forceinline__ void atomic_add(BFloat16* p, BFloat16 v) {
  atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.bits));
}
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p),
            static_cast<unsigned long long>(v));  // two's complement
}
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
// Bytes: compare-and-swap on the aligned 32-bit word that holds the byte.
__device__ __forceinline__ void atomic_add(uint8_t* p, uint8_t v) {
  auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const unsigned shift = unsigned(reinterpret_cast<uintptr_t>(p) & 3) * 8;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    unsigned int byte = ((assumed >> shift) + v) & 0xffu;
    old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
  } while (old != assumed);
}

// out: (outer, n, inner), zeroed; out[o, index[k], c] += src[o, k, c].
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    index_add_kernel(const T* src, T* out, const int64_t* index, int64_t is, int64_t outer,
                     int64_t n, int64_t K, int64_t inner, DeviceErrorSlot* err) {
  const int64_t total = outer * K * inner, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t c = e % inner, r = e / inner, k = r % K, o = r / K;
    const int64_t idx = index[k * is];
    if (idx < 0 || idx >= n) {
      if (c == 0 && o == 0) report_device_error(err, DeviceOp::IndexAdd, idx, k, n);
    } else {
      atomic_add(out + (o * n + idx) * inner + c, src[e]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    dropout_kernel(const T* x, T* y, T* mask, int64_t n, double p, T keep_value, uint64_t seed,
                   uint64_t offset, bool f64) {
  using A = acc_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const bool keep = philox_uniform(seed, offset, uint64_t(i), f64) >= p;
    const T m = keep ? keep_value : T(A(0));
    mask[i] = m;
    y[i] = T(A(x[i]) * A(m));
  }
}

void check_index(const char* op, const Tensor& index, Device d) {
  LOOM_CHECK(index.dtype() == DType::I64 && index.dim() == 1, op,
             ": index must be a 1-d int64 tensor, got ", describe(index));
  LOOM_CHECK(index.device() == d, op, ": index ", describe(index), " is not on ", d);
}

}  // namespace

// x: (..., n, ...) with n at `dim`, index: (K) int64 -> (..., K, ...)
Tensor CudaBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  dim = wrap_dim("index_select", dim, x.dim());
  check_index("index_select", index, x.device());
  Shape out_shape = x.shape();
  const int64_t K = index.size(0);
  out_shape[size_t(dim)] = K;
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  Tensor xc = raw::contiguous(x);
  DimSplit s = split_at(x.shape(), dim);
  const int dev = x.device().index;
  DeviceGuard g(dev);
  auto launch = [&](auto word) {
    using W = decltype(word);
    index_select_kernel<W><<<grid_for(out.numel(), dev), kBlockSize, 0, current_stream(dev)>>>(
        static_cast<const W*>(xc.data_ptr()), static_cast<W*>(out.data_ptr()),
        index.data<int64_t>(), index.stride(0), s.outer, s.n, K, s.inner, device_error_slot(dev));
  };
  switch (x.element_size()) {
    case 1:
      launch(uint8_t{});
      break;
    case 2:
      launch(uint16_t{});
      break;
    case 4:
      launch(uint32_t{});
      break;
    default:
      launch(uint64_t{});
      break;
  }
  LOOM_CUDA_CHECK_LAUNCH("index_select_kernel");
  return out;
}

// src: (..., K, ...), index: (K) int64 -> zeros(shape) with out[..., index[k], ...] += src[..., k,
// ...]
Tensor CudaBackend::index_add(const Shape& shape, int64_t dim, const Tensor& index,
                              const Tensor& src) {
  dim = wrap_dim("index_add", dim, int64_t(shape.size()));
  check_index("index_add", index, src.device());
  Shape want = shape;
  want[size_t(dim)] = index.size(0);
  LOOM_CHECK(src.shape() == want, "index_add: source ", describe(src), " does not match ", want,
             " (the output shape ", shape, " with dim ", dim, " replaced by the index length)");
  Tensor out = empty(shape, {.dtype = src.dtype(), .device = src.device()});
  fill_(out, 0.0);
  if (src.numel() == 0) return out;
  Tensor sc = raw::contiguous(src);
  DimSplit s = split_at(shape, dim);
  const int dev = src.device().index;
  DeviceGuard g(dev);
  LOOM_DISPATCH_NUMERIC(src.dtype(), "index_add", [&] {
    index_add_kernel<scalar_t><<<grid_for(sc.numel(), dev), kBlockSize, 0, current_stream(dev)>>>(
        sc.data<scalar_t>(), out.data<scalar_t>(), index.data<int64_t>(), index.stride(0), s.outer,
        s.n, index.size(0), s.inner, device_error_slot(dev));
  });
  LOOM_CUDA_CHECK_LAUNCH("index_add_kernel");
  return out;
}

// x: any shape -> (y, mask), both x's shape and dtype, contiguous
std::pair<Tensor, Tensor> CudaBackend::dropout(const Tensor& x, double p, uint64_t seed,
                                               uint64_t offset) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  Tensor xc = raw::contiguous(x);
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  Tensor mask = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  const int64_t n = x.numel();
  if (n == 0) return {y, mask};
  const int dev = x.device().index;
  DeviceGuard g(dev);
  const bool f64 = x.dtype() == DType::F64;
  LOOM_DISPATCH_FLOATING(x.dtype(), "dropout", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t keep_value = scalar_t(A(1.0 / (1.0 - p)));
    dropout_kernel<scalar_t><<<grid_for(n, dev), kBlockSize, 0, current_stream(dev)>>>(
        xc.data<scalar_t>(), y.data<scalar_t>(), mask.data<scalar_t>(), n, p, keep_value, seed,
        offset, f64);
  });
  LOOM_CUDA_CHECK_LAUNCH("dropout_kernel");
  return {y, mask};
}

}  // namespace loom::cuda
