// CUDA layer norm over the last dim, forward and backward, with the CPU backend's contract
// (kernels/cpu/cpu_layer_norm.cpp, the naive version): x (M, N) contiguous float32 or float64,
// one warp per row. Forward: the row's mean, then its squared deviations (two passes over the
// row, the second from L1), then y. Backward: dx per row from two row sums; grad_weight and
// grad_bias as column sums in two deterministic stages (Note [Layer norm column sums]).
// Leaves out: float16/bfloat16 storage (the op casts to float32 first, as autocast does) and the
// residual add (the transformer block adds it itself).
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"

namespace loom::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

struct Add {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

template <typename T>
__device__ __forceinline__ T inv_sqrt(T v) {
  return T(1) / sqrt(v);
}

// y = (x - mean) rstd w + b for row blockIdx.x * 8 + warp.
template <typename T>
__global__ void layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y,
                                          T* __restrict__ mean, T* __restrict__ rstd, int64_t M,
                                          int64_t N, double eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const T* r = x + row * N;
  T s = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) s += r[j];
  const T mu = warp_reduce(s, Add{}) / T(N);
  T q = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) q += (r[j] - mu) * (r[j] - mu);
  const T rs = inv_sqrt(warp_reduce(q, Add{}) / T(N) + T(eps));
  for (int64_t j = lane; j < N; j += kWarpSize) {
    T v = (r[j] - mu) * rs;
    if (w) v = v * w[j];
    if (b) v = v + b[j];
    y[row * N + j] = v;
  }
  if (lane == 0) mean[row] = mu, rstd[row] = rs;
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, for row blockIdx.x * 8 + warp.
template <typename T>
__global__ void layer_norm_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     const T* __restrict__ w, const T* __restrict__ mean,
                                     const T* __restrict__ rstd, T* __restrict__ dx, int64_t M,
                                     int64_t N) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const T mu = mean[row], rs = rstd[row];
  const T *d = dy + row * N, *r = x + row * N;
  T sg = 0, sgx = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) {
    T g = w ? d[j] * w[j] : d[j];
    sg += g;
    sgx += g * (r[j] - mu) * rs;
  }
  sg = warp_reduce(sg, Add{}) / T(N);
  sgx = warp_reduce(sgx, Add{}) / T(N);
  for (int64_t j = lane; j < N; j += kWarpSize) {
    T g = w ? d[j] * w[j] : d[j];
    dx[row * N + j] = rs * (g - sg - (r[j] - mu) * rs * sgx);
  }
}

// Note [Layer norm column sums]
// grad_weight[j] = sum_i dy[i, j] xhat[i, j] and grad_bias[j] = sum_i dy[i, j] over M rows (16384
// for the gpt workload). Stage 1: block (32 x 8) of grid (column tiles, row chunks of
// kChunkRows) sums its chunk: thread (tx, ty) takes column tile * 32 + tx and rows ty, ty + 8, ...
// of the chunk (reads of 32 adjacent columns coalesce), then the 8 partials of a column add up
// in shared memory in ty order, into partial[chunk][column]. Stage 2: one thread per column adds
// its chunks' partials in chunk order. Every sum has a fixed order: the result is the same on
// every run, unlike atomics.
constexpr int kChunkRows = 256;

template <typename T>
__global__ void layer_norm_param_partials_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                 const T* __restrict__ mean,
                                                 const T* __restrict__ rstd, T* __restrict__ pw,
                                                 T* __restrict__ pb, int64_t M, int64_t N) {
  __shared__ T sw[kRowsPerBlock][kWarpSize], sb[kRowsPerBlock][kWarpSize];
  const int tx = threadIdx.x % kWarpSize, ty = threadIdx.x / kWarpSize;
  const int64_t col = int64_t(blockIdx.x) * kWarpSize + tx;
  const int64_t lo = int64_t(blockIdx.y) * kChunkRows;
  const int64_t hi = lo + kChunkRows < M ? lo + kChunkRows : M;
  T aw = 0, ab = 0;
  if (col < N)
    for (int64_t i = lo + ty; i < hi; i += kRowsPerBlock) {
      T d = dy[i * N + col];
      aw += d * (x[i * N + col] - mean[i]) * rstd[i];
      ab += d;
    }
  sw[ty][tx] = aw, sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && col < N) {
    for (int k = 1; k < kRowsPerBlock; ++k) aw += sw[k][tx], ab += sb[k][tx];
    pw[int64_t(blockIdx.y) * N + col] = aw;
    pb[int64_t(blockIdx.y) * N + col] = ab;
  }
}

template <typename T>
__global__ void layer_norm_param_finish_kernel(const T* __restrict__ pw, const T* __restrict__ pb,
                                               T* __restrict__ dw, T* __restrict__ db,
                                               int64_t chunks, int64_t N) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= N) return;
  T aw = 0, ab = 0;
  for (int64_t c = 0; c < chunks; ++c) aw += pw[c * N + col], ab += pb[c * N + col];
  if (dw) dw[col] = aw;
  if (db) db[col] = ab;
}

void check_input(const char* op, const Tensor& x) {
  LOOM_CHECK(
      x.dim() == 2 && x.is_contiguous() && (x.dtype() == DType::F32 || x.dtype() == DType::F64), op,
      ": x ", describe(x), " should be (M, N) contiguous float32 or float64");
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

LayerNormOut CudaBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor& b,
                                     double eps) {
  check_input("layer_norm", x);
  const int64_t M = x.size(0), N = x.size(1);
  const Options o{.dtype = x.dtype(), .device = x.device()};
  LayerNormOut out{empty({M, N}, o), empty({M}, o), empty({M}, o)};
  if (M == 0) return out;
  const int dev = x.device().index;
  DeviceGuard g(dev);
  const auto blocks = unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock);
  LOOM_DISPATCH_FLOATING(x.dtype(), "layer_norm", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
      layer_norm_forward_kernel<scalar_t>
          <<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
              x.data<scalar_t>(), ptr_or_null<scalar_t>(w), ptr_or_null<scalar_t>(b),
              out.y.data<scalar_t>(), out.mean.data<scalar_t>(), out.rstd.data<scalar_t>(), M, N,
              eps);
    }
  });
  LOOM_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel");
  return out;
}

LayerNormGrads CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                                const Tensor& mean, const Tensor& rstd,
                                                bool need_weight, bool need_bias) {
  check_input("layer_norm_backward", x);
  LOOM_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype() && dy.is_contiguous(),
             "layer_norm_backward: grad ", describe(dy), " should be contiguous like x ",
             describe(x));
  const int64_t M = x.size(0), N = x.size(1);
  const Options o{.dtype = x.dtype(), .device = x.device()};
  LayerNormGrads r;
  r.grad_input = empty({M, N}, o);
  if (need_weight) r.grad_weight = empty({N}, o);
  if (need_bias) r.grad_bias = empty({N}, o);
  const int dev = x.device().index;
  DeviceGuard g(dev);
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  Tensor pw = empty({std::max<int64_t>(chunks, 1), N}, o),
         pb = empty({std::max<int64_t>(chunks, 1), N}, o);
  LOOM_DISPATCH_FLOATING(x.dtype(), "layer_norm_backward", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
      cudaStream_t s = current_stream(dev);
      if (M > 0)
        layer_norm_dx_kernel<scalar_t><<<unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock),
                                         kRowsPerBlock * kWarpSize, 0, s>>>(
            dy.data<scalar_t>(), x.data<scalar_t>(), ptr_or_null<scalar_t>(w),
            mean.data<scalar_t>(), rstd.data<scalar_t>(), r.grad_input.data<scalar_t>(), M, N);
      if (!need_weight && !need_bias) return;
      if (M > 0)
        layer_norm_param_partials_kernel<scalar_t>
            <<<dim3(unsigned((N + kWarpSize - 1) / kWarpSize), unsigned(chunks)),
               kRowsPerBlock * kWarpSize, 0, s>>>(dy.data<scalar_t>(), x.data<scalar_t>(),
                                                  mean.data<scalar_t>(), rstd.data<scalar_t>(),
                                                  pw.data<scalar_t>(), pb.data<scalar_t>(), M, N);
      layer_norm_param_finish_kernel<scalar_t><<<unsigned((N + 255) / 256), 256, 0, s>>>(
          pw.data<scalar_t>(), pb.data<scalar_t>(),
          need_weight ? r.grad_weight.data<scalar_t>() : nullptr,
          need_bias ? r.grad_bias.data<scalar_t>() : nullptr, M > 0 ? chunks : 0, N);
    }
  });
  LOOM_CUDA_CHECK_LAUNCH("layer_norm_backward kernels");
  return r;
}

}  // namespace loom::cuda
