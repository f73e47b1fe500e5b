// CUDA RMS norm over the last dim, forward and backward, with the CPU backend's contract
// (kernels/cpu/cpu_rms_norm.cpp, the naive version): x (M, N) contiguous in any floating dtype, a
// weight of x's dtype or float32, y in the weight's dtype. The general kernels here give each row a
// warp that walks it one value per lane (twice: the sum of squares, then y or dx), with float32
// arithmetic (float64 for float64 x); grad_weight's column sums run in two deterministic stages, as
// the layer norm's (Note [Layer norm column sums] in cuda_layer_norm.cu). Rows the fast path takes
// (Note [RMS norm, a row in registers] in cuda_rms_norm_rows.cu) go there first; these kernels take
// the rest and are the reference it is tested against.
// Leaves out: a bias, a residual add and output casts (Llama needs none of them here).
#include <algorithm>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/norm/cuda_rms_norm_rows.h"

namespace loom::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each
constexpr int kChunkRows = 512;   // rows per partial of the column sums' first stage

// v rounded to X and back in A: the normalised value as x's dtype holds it.
template <typename X, typename A>
__device__ __forceinline__ A round_to(A v) {
  return A(X(v));
}

// y = w * round_x(x rstd) for row blockIdx.x * 8 + warp. X: x; W: weight and y; A: arithmetic.
template <typename X, typename W, typename A>
__global__ void rms_norm_forward_kernel(const X* __restrict__ x, const W* __restrict__ w,
                                        W* __restrict__ y, A* __restrict__ rstd, int64_t M,
                                        int64_t N, double eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const X* r = x + row * N;
  A q = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) q += A(r[j]) * A(r[j]);
  const A rs = A(1) / sqrt(warp_reduce(q, Plus{}) / A(N) + A(eps));
  for (int64_t j = lane; j < N; j += kWarpSize) {
    const A h = round_to<X>(A(r[j]) * rs);
    y[row * N + j] = W(w ? A(w[j]) * h : h);
  }
  if (lane == 0) rstd[row] = rs;
}

// dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd, for row blockIdx.x * 8 + warp.
template <typename X, typename W, typename A>
__global__ void rms_norm_dx_kernel(const W* __restrict__ dy, const X* __restrict__ x,
                                   const W* __restrict__ w, const A* __restrict__ rstd,
                                   X* __restrict__ dx, int64_t M, int64_t N) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const A rs = rstd[row];
  const W* d = dy + row * N;
  const X* r = x + row * N;
  A s = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) s += A(d[j]) * (w ? A(w[j]) : A(1)) * A(r[j]) * rs;
  s = warp_reduce(s, Plus{}) / A(N);
  for (int64_t j = lane; j < N; j += kWarpSize) {
    const A g = A(d[j]) * (w ? A(w[j]) : A(1));
    dx[row * N + j] = X(rs * (g - A(r[j]) * rs * s));
  }
}

// Stage 1 of grad_weight: block (32 x 8) of grid (column tiles, chunks of kChunkRows rows) sums
// dy round_x(x rstd) over its chunk, thread (tx, ty) over rows ty, ty + 8, ... of column
// tile * 32 + tx, then the 8 partials of a column in ty order, into part[chunk][column].
template <typename X, typename W, typename A>
__global__ void rms_norm_weight_partials_kernel(const W* __restrict__ dy, const X* __restrict__ x,
                                                const A* __restrict__ rstd, A* __restrict__ part,
                                                int64_t M, int64_t N) {
  __shared__ A sums[kRowsPerBlock][kWarpSize];
  const int tx = threadIdx.x % kWarpSize, ty = threadIdx.x / kWarpSize;
  const int64_t col = int64_t(blockIdx.x) * kWarpSize + tx;
  const int64_t lo = int64_t(blockIdx.y) * kChunkRows;
  const int64_t hi = lo + kChunkRows < M ? lo + kChunkRows : M;
  A acc = 0;
  if (col < N)
    for (int64_t i = lo + ty; i < hi; i += kRowsPerBlock)
      acc += A(dy[i * N + col]) * round_to<X>(A(x[i * N + col]) * rstd[i]);
  sums[ty][tx] = acc;
  __syncthreads();
  if (ty != 0 || col >= N) return;
  for (int k = 1; k < kRowsPerBlock; ++k) acc += sums[k][tx];
  part[int64_t(blockIdx.y) * N + col] = acc;
}

// Stage 2: dw[column] = the sum of `rows` partial rows, thread (tx, ty) over rows ty, ty + 8, ...,
// then the 8 sums in ty order. A: the partials' type; W: the weight's.
template <typename A, typename W>
__global__ void rms_norm_weight_finish_kernel(const A* __restrict__ part, W* __restrict__ dw,
                                              int64_t rows, int64_t N) {
  __shared__ A sums[kRowsPerBlock][kWarpSize];
  const int tx = threadIdx.x % kWarpSize, ty = threadIdx.x / kWarpSize;
  const int64_t col = int64_t(blockIdx.x) * kWarpSize + tx;
  A acc = 0;
  if (col < N)
    for (int64_t c = ty; c < rows; c += kRowsPerBlock) acc += part[c * N + col];
  sums[ty][tx] = acc;
  __syncthreads();
  if (ty != 0 || col >= N) return;
  for (int k = 1; k < kRowsPerBlock; ++k) acc += sums[k][tx];
  dw[col] = W(acc);
}

// f(X{}, W{}, A{}): x's type, the weight's and y's (x's, or float for a float32 weight), and the
// arithmetic's (double for double x, else float).
template <typename F>
void with_types(const Tensor& x, DType w_dtype, const char* op, const F& f) {
  LOOM_DISPATCH_FLOATING(x.dtype(), op, [&] {
    using X = scalar_t;
    using A = std::conditional_t<std::is_same_v<X, double>, double, float>;
    if (w_dtype != x.dtype())
      f(X{}, float{}, A{});
    else
      f(X{}, X{}, A{});
  });
}

// grad_weight's second stage over `rows` partial rows of A (float for the fast path's).
template <typename A>
void finish_weight_grad(const Tensor& part, int64_t rows, Tensor& dw, cudaStream_t s) {
  const int64_t N = dw.size(0);
  if (N == 0) return;
  const auto blocks = unsigned((N + kWarpSize - 1) / kWarpSize);
  LOOM_DISPATCH_FLOATING(dw.dtype(), "rms_norm_backward", [&] {
    rms_norm_weight_finish_kernel<A, scalar_t>
        <<<blocks, kRowsPerBlock * kWarpSize, 0, s>>>(part.data<A>(), dw.data<scalar_t>(), rows, N);
  });
}

}  // namespace

// x: (M, N) contiguous; weight: (N) or undefined -> y (M, N) in weight's dtype, rstd (M)
RmsNormOut CudaBackend::rms_norm(const Tensor& x, const Tensor& w, double eps) {
  const DType y_dtype = check_rms_norm_args("rms_norm", x, w);
  const int64_t M = x.size(0), N = x.size(1);
  RmsNormOut out{empty({M, N}, {.dtype = y_dtype, .device = x.device()}),
                 empty({M}, {.dtype = rms_norm_stat_dtype(x.dtype()), .device = x.device()})};
  if (M == 0) return out;
  const int dev = x.device().index;
  DeviceGuard g(dev);
  if (rms_norm_forward_rows(x, w, eps, out)) return out;
  const auto blocks = unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock);
  with_types(x, y_dtype, "rms_norm", [&](auto xt, auto wt, auto at) {
    using X = decltype(xt);
    using W = decltype(wt);
    using A = decltype(at);
    rms_norm_forward_kernel<X, W, A><<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
        x.data<X>(), data_or_null<W>(w), out.y.data<W>(), out.rstd.data<A>(), M, N, eps);
  });
  LOOM_CUDA_CHECK_LAUNCH("rms_norm_forward_kernel");
  return out;
}

// dy: (M, N) in y's dtype; x, weight, rstd: the forward's -> dx (M, N), dw (N)
RmsNormGrads CudaBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                            const Tensor& rstd, bool need_weight) {
  check_rms_norm_backward_args(dy, x, w, rstd);
  LOOM_CHECK(!need_weight || w.defined(), "rms_norm_backward: grad_weight asked for without a ",
             "weight; x ", describe(x));
  const int64_t M = x.size(0), N = x.size(1);
  RmsNormGrads r{empty({M, N}, {.dtype = x.dtype(), .device = x.device()}), Tensor()};
  if (need_weight) r.grad_weight = empty({N}, {.dtype = w.dtype(), .device = x.device()});
  const int dev = x.device().index;
  DeviceGuard g(dev);
  cudaStream_t s = current_stream(dev);
  Tensor part;
  if (rms_norm_backward_rows(dy, x, w, rstd, r, need_weight, part)) {
    if (need_weight) finish_weight_grad<float>(part, part.size(0), r.grad_weight, s);
    LOOM_CUDA_CHECK_LAUNCH("rms_norm_backward kernels");
    return r;
  }
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  with_types(x, dy.dtype(), "rms_norm_backward", [&](auto xt, auto wt, auto at) {
    using X = decltype(xt);
    using W = decltype(wt);
    using A = decltype(at);
    if (M > 0)
      rms_norm_dx_kernel<X, W, A>
          <<<unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, s>>>(
              dy.data<W>(), x.data<X>(), data_or_null<W>(w), rstd.data<A>(), r.grad_input.data<X>(),
              M, N);
    if (!need_weight) return;
    part = empty({std::max<int64_t>(chunks, 1), N},
                 {.dtype = rms_norm_stat_dtype(x.dtype()), .device = x.device()});
    if (M > 0)
      rms_norm_weight_partials_kernel<X, W, A>
          <<<dim3(unsigned((N + kWarpSize - 1) / kWarpSize), unsigned(chunks)),
             kRowsPerBlock * kWarpSize, 0, s>>>(dy.data<W>(), x.data<X>(), rstd.data<A>(),
                                                part.data<A>(), M, N);
    finish_weight_grad<A>(part, M > 0 ? chunks : 0, r.grad_weight, s);
  });
  LOOM_CUDA_CHECK_LAUNCH("rms_norm_backward kernels");
  return r;
}

}  // namespace loom::cuda
