// CUDA indexing kernels: index_select, index_copy_, index_select's adjoint index_add (atomic adds,
// so repeated indices accumulate), embedding's deterministic backward (a radix sort of the ids,
// then one ordered sum per row), and dropout, whose mask comes from the same Philox draws as the
// CPU's (see Note [Dropout mask] in kernels/cpu/cpu_index.cpp): the same seed gives the same mask.
// index_select moves elements as opaque words of their size (one kernel per size, not per dtype).
// Leaves out: a deterministic index_add for any dim (embedding_backward is the one for rows).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

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

// The walk both index kernels make: element e of the indexed side (outer, K, inner) and where
// it lands on the other side (outer, n, inner) through index[k * is], passed to f(e, at); at is -1
// for an index outside [0, n), which is reported once (by the element with c = 0, o = 0) as `op`.
template <typename F>
__device__ __forceinline__ void for_each_indexed(const int64_t* index, int64_t is, int64_t outer,
                                                 int64_t n, int64_t K, int64_t inner, DeviceOp op,
                                                 DeviceErrorSlot* err, F f) {
  const int64_t total = outer * K * inner, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t c = e % inner, r = e / inner, k = r % K, o = r / K;
    const int64_t idx = index[k * is];
    if (idx < 0 || idx >= n) {
      if (c == 0 && o == 0) report_device_error(err, op, idx, k, n);
      f(e, int64_t(-1));
    } else {
      f(e, (o * n + idx) * inner + c);
    }
  }
}

// The index kernels that move elements: index_select gathers, out (outer, K, inner) <- x (outer,
// n, inner) at the K indices (0 where an index is out of range); index_copy_ scatters, dst (outer,
// n, inner) at the K indices <- src (outer, K, inner). `from` and `to` are those two sides.
template <typename W, bool kScatter>
__global__ void __launch_bounds__(kBlockSize)
    index_move_kernel(const W* from, W* to, const int64_t* index, int64_t is, int64_t outer,
                      int64_t n, int64_t K, int64_t inner, DeviceErrorSlot* err) {
  const DeviceOp op = kScatter ? DeviceOp::IndexCopy : DeviceOp::IndexSelect;
  for_each_indexed(index, is, outer, n, K, inner, op, err, [&](int64_t e, int64_t at) {
    if (!kScatter)
      to[e] = at < 0 ? W(0) : from[at];
    else if (at >= 0)
      to[at] = from[e];
  });
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
  for_each_indexed(index, is, outer, n, K, inner, DeviceOp::IndexAdd, err,
                   [&](int64_t e, int64_t at) {
                     if (at >= 0) atomic_add(out + at, src[e]);
                   });
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

// Threads per block of embedding_backward_kernel; a block covers that many columns of one row.
constexpr int kEmbeddingColumns = 128;

// keys[p] = ids[p * is], or V for an id out of [0, V) (reported; it sorts last and is never
// summed); pos[p] = p, the payload the sort carries.
__global__ void __launch_bounds__(kBlockSize)
    embedding_keys_kernel(const int64_t* ids, int64_t is, int32_t* keys, int32_t* pos, int64_t n,
                          int64_t V, DeviceErrorSlot* err) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += step) {
    const int64_t id = ids[p * is];
    const bool ok = id >= 0 && id < V;
    if (!ok) report_device_error(err, DeviceOp::EmbeddingBackward, id, p, V);
    keys[p] = int32_t(ok ? id : V);
    pos[p] = int32_t(p);
  }
}

// The first index of the sorted keys[0, n) whose key is >= v.
__device__ __forceinline__ int64_t first_at_least(const int32_t* keys, int64_t n, int64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (int64_t(keys[mid]) < v) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// out: (V, D). Block (v, tile) finds row v's run in the sorted keys (positions in increasing
// order, the sort being stable) and each thread sums its column of grad over the run, in order, in
// acc_t (Note [Deterministic embedding backward] in kernels/cpu/cpu_index.cpp).
template <typename T>
__global__ void __launch_bounds__(kEmbeddingColumns)
    embedding_backward_kernel(const T* grad, const int32_t* keys, const int32_t* pos, T* out,
                              int64_t n, int64_t D) {
  using A = acc_t<T>;
  const int64_t v = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * kEmbeddingColumns + threadIdx.x;
  __shared__ int64_t run[2];
  if (threadIdx.x < 2) run[threadIdx.x] = first_at_least(keys, n, v + threadIdx.x);
  __syncthreads();
  if (c >= D) return;
  A acc = A(0);
#pragma unroll 4
  for (int64_t k = run[0]; k < run[1]; ++k) acc += A(grad[int64_t(pos[k]) * D + c]);
  out[v * D + c] = T(acc);
}

void check_index(const char* op, const Tensor& index, Device d) {
  LOOM_CHECK(index.dtype() == DType::I64 && index.dim() == 1, op,
             ": index must be a 1-d int64 tensor, got ", describe(index));
  LOOM_CHECK(index.device() == d, op, ": index ", describe(index), " is not on ", d);
}

// One index_move_kernel over the (outer, K, inner) side's elements, its word type of the element
// size: the elements move as opaque words (one kernel per size, not per dtype).
template <bool kScatter>
void launch_index_move(const Tensor& from, const Tensor& to, const Tensor& index, DimSplit s,
                       int64_t K) {
  const int dev = to.device().index;
  DeviceGuard g(dev);
  auto launch = [&](auto word) {
    using W = decltype(word);
    index_move_kernel<W, kScatter>
        <<<grid_for(s.outer * K * s.inner, dev), kBlockSize, 0, current_stream(dev)>>>(
            static_cast<const W*>(from.data_ptr()), static_cast<W*>(to.data_ptr()),
            index.data<int64_t>(), index.stride(0), s.outer, s.n, K, s.inner,
            device_error_slot(dev));
  };
  switch (to.element_size()) {
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
  LOOM_CUDA_CHECK_LAUNCH(kScatter ? "index_copy_ kernel" : "index_select kernel");
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
  launch_index_move<false>(raw::contiguous(x), out, index, split_at(x.shape(), dim), K);
  return out;
}

// dst: (..., n, ...) contiguous, index: (K) int64 on the device, src: (..., K, ...). The index is
// read by the kernel only (Note [Errors found on the device]): capturable with a changing index.
void CudaBackend::index_copy_(const Tensor& dst, int64_t dim, const Tensor& index,
                              const Tensor& src) {
  dim = wrap_dim("index_copy_", dim, dst.dim());
  check_index("index_copy_", index, dst.device());
  Shape want = dst.shape();
  want[size_t(dim)] = index.size(0);
  LOOM_CHECK(src.shape() == want, "index_copy_: source ", describe(src), " does not match ", want,
             " (", describe(dst), " with dim ", dim, " replaced by the index length)");
  if (src.numel() == 0) return;
  launch_index_move<true>(raw::contiguous(src), dst, index, split_at(dst.shape(), dim),
                          index.size(0));
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

// grad: (N, D), ids: (N) int64 in [0, num_rows) -> (num_rows, D). An id out of range is reported
// through the device error slot (Note [Errors found on the device]), not checked on the host,
// which would copy the ids back and synchronise every step.
Tensor CudaBackend::embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num_rows) {
  LOOM_CHECK(grad.dim() == 2 && ids.dim() == 1 && ids.size(0) == grad.size(0),
             "embedding_backward: expected grad (N, D) and ids (N), got ", describe(grad), " and ",
             describe(ids));
  check_index("embedding_backward", ids, grad.device());
  const int64_t n = grad.size(0), D = grad.size(1), V = num_rows;
  LOOM_CHECK(V >= 0 && V < int64_t(INT32_MAX) && n < int64_t(INT32_MAX), "embedding_backward: ", n,
             " ids over ", V,
             " rows: the sort takes 32-bit keys and positions (fewer than 2^31 of each)");
  LOOM_CHECK(D <= int64_t(kEmbeddingColumns) * 65535, "embedding_backward: row width ", D,
             " is too large for the grid");
  const Device dev = grad.device();
  Tensor out = empty({V, D}, {.dtype = grad.dtype(), .device = dev});
  if (out.numel() == 0) return out;
  if (n == 0) {
    fill_(out, 0.0);
    return out;
  }
  Tensor gc = raw::contiguous(grad);
  const int d = dev.index;
  DeviceGuard guard(d);
  cudaStream_t stream = current_stream(d);
  Tensor keys = empty({n}, {.dtype = DType::I32, .device = dev});
  Tensor pos = empty({n}, {.dtype = DType::I32, .device = dev});
  embedding_keys_kernel<<<grid_for(n, d), kBlockSize, 0, stream>>>(
      ids.data<int64_t>(), ids.stride(0), keys.data<int32_t>(), pos.data<int32_t>(), n, V,
      device_error_slot(d));
  LOOM_CUDA_CHECK_LAUNCH("embedding_keys_kernel");
  // A stable sort of the positions by key, on the bits that keys in [0, V] use.
  int end_bit = 1;
  while ((int64_t(1) << end_bit) <= V) ++end_bit;
  Tensor keys_sorted = empty({n}, {.dtype = DType::I32, .device = dev});
  Tensor pos_sorted = empty({n}, {.dtype = DType::I32, .device = dev});
  size_t temp_bytes = 0;
  // The keys are in [0, V]: sorted as unsigned, the same order.
  auto* k_in = reinterpret_cast<uint32_t*>(keys.data<int32_t>());
  auto* k_out = reinterpret_cast<uint32_t*>(keys_sorted.data<int32_t>());
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out,
                                                  pos.data<int32_t>(), pos_sorted.data<int32_t>(),
                                                  int(n), 0, end_bit, stream));
  Tensor temp =
      empty({std::max<int64_t>(1, int64_t(temp_bytes))}, {.dtype = DType::U8, .device = dev});
  LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, k_in, k_out,
                                                  pos.data<int32_t>(), pos_sorted.data<int32_t>(),
                                                  int(n), 0, end_bit, stream));
  const dim3 grid(unsigned(V), unsigned((D + kEmbeddingColumns - 1) / kEmbeddingColumns));
  LOOM_DISPATCH_FLOATING(grad.dtype(), "embedding_backward", [&] {
    embedding_backward_kernel<scalar_t><<<grid, kEmbeddingColumns, 0, stream>>>(
        gc.data<scalar_t>(), keys_sorted.data<int32_t>(), pos_sorted.data<int32_t>(),
        out.data<scalar_t>(), n, D);
  });
  LOOM_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
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
