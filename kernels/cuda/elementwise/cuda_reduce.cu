// CUDA reductions: sum, mean, max and min over any dims, and max_dim (values and first index).
// Warp-shuffle reductions, float accumulation for f16/bf16/f32, double for f64, int64 for
// integers. See Note [Reduction layouts].
// Leaves out: reductions over non-adjacent dims without a copy (those permute and copy first).
#include <limits>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/raw_ops.h"
#include "kernels/reduce_layout.h"

namespace loom::cuda {

// Note [Reduction layouts]
// The input is seen as a contiguous matrix in one of two ways, like the CPU backend does:
//  - rows (outer, n): the reduced dims innermost. If x is not already laid out so, it is permuted
//    (kept dims first) and copied. Rows of up to 512 elements take one warp each; longer rows a
//    block each, and when there are too few rows to fill the device each row is cut into chunks
//    whose partial results a second launch combines (no atomics: results are deterministic).
//  - columns (R, C): the reduced dims lead a contiguous x (a bias gradient, sum over the batch).
//    Threads own columns, so reads are coalesced; row ranges are split over blocks when C is
//    small, again with a second pass over the partials.
// Each path has a naive kernel beside it (one thread per output), used when use_naive_kernels().

namespace {

// The accumulate type: float for f32/f16/bf16, double for f64, int64 for integers.
template <typename T>
using red_acc_t =
    std::conditional_t<std::is_same_v<T, double>, double,
                       std::conditional_t<std::is_floating_point_v<acc_t<T>>, float, int64_t>>;

template <typename A>
struct Reducer {
  ReduceOp op;
  __device__ __forceinline__ A identity() const {
    if (op == ReduceOp::Max)
      return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::lowest();
    if (op == ReduceOp::Min)
      return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                  : std::numeric_limits<A>::max();
    return A(0);
  }
  // NaN propagates through max and min.
  __device__ __forceinline__ A operator()(A a, A b) const {
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) return a + b;
    if (a != a) return a;
    if (b != b) return b;
    return op == ReduceOp::Max ? (b > a ? b : a) : (b < a ? b : a);
  }
  __device__ __forceinline__ A finish(A a, int64_t count) const {
    return op == ReduceOp::Mean ? a / A(count) : a;
  }
};

// One block per (row, chunk): blockIdx.x = row * splits + chunk. With finish, out[row] is the
// result in Out; otherwise out[row * splits + chunk] is the partial in the accumulate type.
template <typename In, typename Out, typename A>
__global__ void __launch_bounds__(kBlockSize)
    reduce_rows_kernel(const In* x, Out* out, int64_t n, int64_t splits, int64_t chunk,
                       Reducer<A> r, int64_t count, bool finish) {
  const int64_t row = blockIdx.x / splits, part = blockIdx.x % splits;
  const int64_t begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
  const In* p = x + row * n;
  A a = r.identity();
#pragma unroll 4
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) a = r(a, A(p[j]));
  a = block_reduce(a, r, r.identity());
  if (threadIdx.x == 0) out[blockIdx.x] = finish ? Out(r.finish(a, count)) : Out(a);
}

// Short rows: one warp per row, kBlockSize / 32 rows per block.
template <typename T, typename A>
__global__ void __launch_bounds__(kBlockSize)
    reduce_rows_warp_kernel(const T* x, T* out, int64_t rows, int64_t n, Reducer<A> r) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarpSize;
  const T* p = x + row * n;
  A a = r.identity();
  for (int64_t j = lane; j < n; j += kWarpSize) a = r(a, A(p[j]));
  a = warp_reduce(a, r);
  if (lane == 0) out[row] = T(r.finish(a, n));
}

// Columns of a contiguous (R, C) block: 32 columns x 8 row lanes per block; blockIdx.y selects
// a range of `chunk` rows. out[blockIdx.y * C + c] as in reduce_rows_kernel.
template <typename In, typename Out, typename A>
__global__ void __launch_bounds__(kBlockSize)
    reduce_cols_kernel(const In* x, Out* out, int64_t R, int64_t C, int64_t chunk, Reducer<A> r,
                       int64_t count, bool finish) {
  __shared__ A part[8][kWarpSize + 1];
  const int64_t c = int64_t(blockIdx.x) * kWarpSize + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
  A a = r.identity();
  if (c < C)
    for (int64_t i = r0 + threadIdx.y; i < r1; i += 8) a = r(a, A(x[i * C + c]));
  part[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < 8; ++k) a = r(a, part[k][threadIdx.x]);
    out[int64_t(blockIdx.y) * C + c] = finish ? Out(r.finish(a, count)) : Out(a);
  }
}

// The reference: one thread per row of a contiguous (rows, n) block, a sequential loop that
// accumulates floating values in double (as the CPU does), so it stays exact enough to judge
// the float tree reductions above even for millions of elements.
template <typename T, typename A>
__global__ void naive_reduce_rows_kernel(const T* x, T* out, int64_t rows, int64_t n,
                                         Reducer<A> r) {
  using W = std::conditional_t<std::is_floating_point_v<A>, double, A>;
  const Reducer<W> w{r.op};
  int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  W a = w.identity();
  for (int64_t j = 0; j < n; ++j) a = w(a, W(x[row * n + j]));
  out[row] = T(A(w.finish(a, n)));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// x: contiguous (rows, n) -> out: (rows)
template <typename T>
void reduce_rows(ReduceOp op, const T* x, T* out, int64_t rows, int64_t n, int dev,
                 cudaStream_t s) {
  using A = red_acc_t<T>;
  Reducer<A> r{op};
  if (use_naive_kernels()) {
    naive_reduce_rows_kernel<T, A>
        <<<ceil_div(rows, kBlockSize), kBlockSize, 0, s>>>(x, out, rows, n, r);
    LOOM_CUDA_CHECK_LAUNCH("naive_reduce_rows_kernel");
    return;
  }
  if (n <= 512) {
    const int per_block = kBlockSize / kWarpSize;
    reduce_rows_warp_kernel<T, A>
        <<<ceil_div(rows, per_block), kBlockSize, 0, s>>>(x, out, rows, n, r);
    LOOM_CUDA_CHECK_LAUNCH("reduce_rows_warp_kernel");
    return;
  }
  const int64_t sms = multiprocessor_count(dev);
  int64_t splits = 1;
  if (rows < 2 * sms)
    splits = std::max<int64_t>(1, std::min(ceil_div(n, 4096), ceil_div(4 * sms, rows)));
  const int64_t chunk = ceil_div(n, splits);
  LOOM_CHECK(rows * splits < int64_t(INT32_MAX), "reduce: too many rows (", rows,
             ") for one launch");
  if (splits == 1) {
    reduce_rows_kernel<T, T, A><<<rows, kBlockSize, 0, s>>>(x, out, n, 1, chunk, r, n, true);
    LOOM_CUDA_CHECK_LAUNCH("reduce_rows_kernel");
    return;
  }
  Tensor partial = empty({rows, splits}, {.dtype = DTypeOf<A>::value, .device = cuda_device(dev)});
  A* pp = static_cast<A*>(partial.data_ptr());
  reduce_rows_kernel<T, A, A>
      <<<rows * splits, kBlockSize, 0, s>>>(x, pp, n, splits, chunk, r, n, false);
  LOOM_CUDA_CHECK_LAUNCH("reduce_rows_kernel (partial)");
  reduce_rows_kernel<A, T, A><<<rows, kBlockSize, 0, s>>>(pp, out, splits, 1, splits, r, n, true);
  LOOM_CUDA_CHECK_LAUNCH("reduce_rows_kernel (final)");
}

// x: contiguous (R, C) -> out: (C), reducing the leading dim
template <typename T>
void reduce_cols(ReduceOp op, const T* x, T* out, int64_t R, int64_t C, int dev, cudaStream_t s) {
  using A = red_acc_t<T>;
  Reducer<A> r{op};
  const int64_t bx = ceil_div(C, kWarpSize);
  const int64_t sms = multiprocessor_count(dev);
  int64_t splits = std::max<int64_t>(1, std::min(ceil_div(R, 256), ceil_div(4 * sms, bx)));
  splits = std::min<int64_t>(splits, 65535);
  const int64_t chunk = ceil_div(R, splits);
  splits = ceil_div(R, chunk);
  LOOM_CHECK(bx < int64_t(INT32_MAX), "reduce: too many columns (", C, ") for one launch");
  dim3 block(kWarpSize, 8);
  if (splits == 1) {
    reduce_cols_kernel<T, T, A>
        <<<dim3(unsigned(bx), 1), block, 0, s>>>(x, out, R, C, chunk, r, R, true);
    LOOM_CUDA_CHECK_LAUNCH("reduce_cols_kernel");
    return;
  }
  Tensor partial = empty({splits, C}, {.dtype = DTypeOf<A>::value, .device = cuda_device(dev)});
  A* pp = static_cast<A*>(partial.data_ptr());
  reduce_cols_kernel<T, A, A>
      <<<dim3(unsigned(bx), unsigned(splits)), block, 0, s>>>(x, pp, R, C, chunk, r, R, false);
  LOOM_CUDA_CHECK_LAUNCH("reduce_cols_kernel (partial)");
  reduce_cols_kernel<A, T, A>
      <<<dim3(unsigned(bx), 1), block, 0, s>>>(pp, out, splits, C, splits, r, R, true);
  LOOM_CUDA_CHECK_LAUNCH("reduce_cols_kernel (final)");
}

}  // namespace

// x: any shape, dims: sorted unique (empty = all) -> x's shape without dims (or 1s with keepdim)
Tensor CudaBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims_in,
                           bool keepdim) {
  const ReduceLayout L = checked_reduce_layout(op, x.shape(), x.dtype(), dims_in, keepdim);
  Tensor out = reduce_result(*this, op, x, L);
  if (L.inner == 0 || L.outer == 0) return out;
  const int64_t outer = L.outer, inner = L.inner;
  const int dev = x.device().index;
  DeviceGuard g(dev);
  cudaStream_t s = current_stream(dev);
  LOOM_DISPATCH_NUMERIC(x.dtype(), reduce_name(op), [&] {
    if (L.reduced_dims_lead && x.is_contiguous() && outer > 1 && !use_naive_kernels()) {
      reduce_cols<scalar_t>(op, x.data<scalar_t>(), out.data<scalar_t>(), inner, outer, dev, s);
      return;
    }
    Tensor xc = raw::contiguous(raw::permute(x, L.perm));
    reduce_rows<scalar_t>(op, xc.data<scalar_t>(), out.data<scalar_t>(), outer, inner, dev, s);
  });
  return out;
}

namespace {

// (value, index) pairs: the larger value wins, NaN beats everything, ties go to the lower index.
template <typename A>
struct ArgMax {
  __device__ __forceinline__ bool second_wins(A v1, int64_t i1, A v2, int64_t i2) const {
    if (v1 != v1) return v2 != v2 && i2 < i1;
    if (v2 != v2) return true;
    return v2 > v1 || (v2 == v1 && i2 < i1);
  }
};

template <typename A>
__device__ __forceinline__ void warp_argmax(A& v, int64_t& i) {
  ArgMax<A> c;
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    A v2 = __shfl_xor_sync(0xffffffffu, v, o);
    int64_t i2 = __shfl_xor_sync(0xffffffffu, i, o);
    if (c.second_wins(v, i, v2, i2)) {
      v = v2;
      i = i2;
    }
  }
}

template <typename A>
__device__ __forceinline__ A lowest() {
  return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                              : std::numeric_limits<A>::lowest();
}

// One warp per row (per_warp) or one block per row of a contiguous (rows, n) block.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    max_dim_kernel(const T* x, T* values, int64_t* indices, int64_t rows, int64_t n,
                   bool per_warp) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = per_warp
                          ? int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize
                          : int64_t(blockIdx.x);
  if (row >= rows) return;  // uniform per warp (per_warp) or per block
  const int tid = per_warp ? lane : threadIdx.x, nt = per_warp ? kWarpSize : blockDim.x;
  ArgMax<A> c;
  A best = lowest<A>();
  int64_t arg = INT64_MAX;
  for (int64_t j = tid; j < n; j += nt) {
    A v = A(x[row * n + j]);
    if (c.second_wins(best, arg, v, j)) {
      best = v;
      arg = j;
    }
  }
  warp_argmax(best, arg);
  if (!per_warp) {
    __shared__ A sv[kWarpSize];
    __shared__ int64_t si[kWarpSize];
    const int warp = threadIdx.x / kWarpSize, nwarps = blockDim.x / kWarpSize;
    if (lane == 0) {
      sv[warp] = best;
      si[warp] = arg;
    }
    __syncthreads();
    best = lane < nwarps ? sv[lane] : lowest<A>();
    arg = lane < nwarps ? si[lane] : INT64_MAX;
    warp_argmax(best, arg);
  }
  if (tid == 0) {
    values[row] = T(best);
    indices[row] = arg;
  }
}

template <typename T>
__global__ void naive_max_dim_kernel(const T* x, T* values, int64_t* indices, int64_t rows,
                                     int64_t n) {
  using A = acc_t<T>;
  int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  A best = A(x[row * n]);
  int64_t arg = 0;
  for (int64_t j = 1; j < n && best == best; ++j) {
    A v = A(x[row * n + j]);
    if (v > best || v != v) {
      best = v;
      arg = j;
    }
  }
  values[row] = T(best);
  indices[row] = arg;
}

}  // namespace

// x: any shape -> (values, int64 indices), x's shape without dim (or 1 there with keepdim)
std::pair<Tensor, Tensor> CudaBackend::max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  const ReduceLayout L = max_dim_layout(x.shape(), dim, keepdim);
  const int64_t n = x.size(dim);
  Tensor xc = raw::contiguous(raw::permute(x, L.perm));
  Tensor values = empty(L.out_shape, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(L.out_shape, {.dtype = DType::I64, .device = x.device()});
  const int64_t rows = values.numel();
  if (rows == 0) return {values, indices};
  const int dev = x.device().index;
  DeviceGuard g(dev);
  cudaStream_t s = current_stream(dev);
  LOOM_DISPATCH_NUMERIC(x.dtype(), "max", [&] {
    const scalar_t* p = xc.data<scalar_t>();
    if (use_naive_kernels()) {
      naive_max_dim_kernel<scalar_t><<<ceil_div(rows, kBlockSize), kBlockSize, 0, s>>>(
          p, values.data<scalar_t>(), indices.data<int64_t>(), rows, n);
    } else if (n <= 1024) {
      max_dim_kernel<scalar_t><<<ceil_div(rows, kBlockSize / kWarpSize), kBlockSize, 0, s>>>(
          p, values.data<scalar_t>(), indices.data<int64_t>(), rows, n, true);
    } else {
      max_dim_kernel<scalar_t><<<rows, kBlockSize, 0, s>>>(p, values.data<scalar_t>(),
                                                           indices.data<int64_t>(), rows, n, false);
    }
  });
  LOOM_CUDA_CHECK_LAUNCH("max_dim_kernel");
  return {values, indices};
}

}  // namespace loom::cuda
