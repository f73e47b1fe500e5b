// CUDA layer norm over the last dim, forward and backward, with the CPU backend's contract
// (kernels/cpu/cpu_layer_norm.cpp, the naive version): x (M, N) contiguous float32 or float64,
// one warp per row. Forward: the row's mean, then its squared deviations (two passes over the
// row, the second from L1), then y. Backward: dx per row from two row sums; grad_weight and
// grad_bias as column sums in two deterministic stages (Note [Layer norm column sums]). The
// backward can also add a gradient of x that other ops sent and write dx again in 16 bits
// (LayerNormBackwardExtras). float32 rows of up to 1024 values, a multiple of 4, go to the fast
// path first (Note [Layer norm, a row in registers] in cuda_layer_norm_rows.cu); these kernels
// take the rest and are the reference it is tested against.
// With a residual the forward first adds it (x + residual, written out as `sum`) and normalises
// that; y may be written in a 16-bit type and dy read in one (Note [Layer norm with the residual
// add] in autograd/ops/layer_norm.cpp). Leaves out: float16/bfloat16 x (the op casts it to float32
// first, as autocast does).
#include <algorithm>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm/cuda_layer_norm_rows.h"

namespace loom::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

template <typename T>
__device__ __forceinline__ T inv_sqrt(T v) {
  return T(1) / sqrt(v);
}

// y = (x' - mean) rstd w + b for row blockIdx.x * 8 + warp, where x' = x + residual (written to
// sum) when a residual is given, else x. T: x, w, b, the statistics (float32 or float64); R: the
// residual; Y: y (T, or a 16-bit type when the cast to a Linear's dtype is fused).
template <typename T, typename R, typename Y>
__global__ void layer_norm_forward_kernel(const T* __restrict__ x, const R* __restrict__ res,
                                          const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ sum, Y* __restrict__ y,
                                          T* __restrict__ mean, T* __restrict__ rstd, int64_t M,
                                          int64_t N, double eps) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const T* r = x + row * N;
  T s = 0;
  if (res) {  // each lane re-reads only what it wrote itself: no synchronisation needed
    T* o = sum + row * N;
    const R* a = res + row * N;
    for (int64_t j = lane; j < N; j += kWarpSize) {
      const T v = r[j] + T(a[j]);
      o[j] = v;
      s += v;
    }
    r = o;
  } else {
    for (int64_t j = lane; j < N; j += kWarpSize) s += r[j];
  }
  const T mu = warp_reduce(s, Plus{}) / T(N);
  T q = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) q += (r[j] - mu) * (r[j] - mu);
  const T rs = inv_sqrt(warp_reduce(q, Plus{}) / T(N) + T(eps));
  for (int64_t j = lane; j < N; j += kWarpSize) {
    T v = (r[j] - mu) * rs;
    if (w) v = v * w[j];
    if (b) v = v + b[j];
    y[row * N + j] = Y(v);
  }
  if (lane == 0) mean[row] = mu, rstd[row] = rs;
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) (+ add), g = dy w, for row blockIdx.x * 8 + warp.
// Y: dy's type (T, or the 16-bit type of a fused cast's gradient); add: a gradient of x from
// elsewhere, or null; low: dx again in L (a 16-bit type), or null.
template <typename T, typename Y, typename L>
__global__ void layer_norm_dx_kernel(const Y* __restrict__ dy, const T* __restrict__ x,
                                     const T* __restrict__ w, const T* __restrict__ mean,
                                     const T* __restrict__ rstd, const T* __restrict__ add,
                                     T* __restrict__ dx, L* __restrict__ low, int64_t M,
                                     int64_t N) {
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const T mu = mean[row], rs = rstd[row];
  const Y* d = dy + row * N;
  const T* r = x + row * N;
  T sg = 0, sgx = 0;
  for (int64_t j = lane; j < N; j += kWarpSize) {
    T g = w ? T(d[j]) * w[j] : T(d[j]);
    sg += g;
    sgx += g * (r[j] - mu) * rs;
  }
  sg = warp_reduce(sg, Plus{}) / T(N);
  sgx = warp_reduce(sgx, Plus{}) / T(N);
  for (int64_t j = lane; j < N; j += kWarpSize) {
    T g = w ? T(d[j]) * w[j] : T(d[j]);
    const T v = rs * (g - sg - (r[j] - mu) * rs * sgx);
    const T out = add ? v + add[row * N + j] : v;
    dx[row * N + j] = out;
    if (low) low[row * N + j] = L(out);
  }
}

// Note [Layer norm column sums]
// grad_weight[j] = sum_i dy[i, j] xhat[i, j] and grad_bias[j] = sum_i dy[i, j] over M rows (16384
// for the gpt workload). Stage 1: block (32 x 8) of grid (column tiles, row chunks of
// kChunkRows) sums its chunk: thread (tx, ty) takes column tile * 32 + tx and rows ty, ty + 8, ...
// of the chunk (reads of 32 adjacent columns coalesce), then the 8 partials of a column add up
// in shared memory in ty order, into partial[chunk][column]. Stage 2 adds a column's partials the
// same way (8 strided sums, then those in order). Every sum has a fixed order: the result is the
// same on every run, unlike atomics.
constexpr int kChunkRows = 512;  // 32 chunks at GPT-2 size: stage 2 reads 32 partials, not 64

template <typename T, typename Y>
__global__ void layer_norm_param_partials_kernel(const Y* __restrict__ dy, const T* __restrict__ x,
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
      T d = T(dy[i * N + col]);
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

// Stage 2: block (32 x 8) of grid (column tiles) adds the `chunks` partials of its 32 columns,
// thread (tx, ty) rows ty, ty + 8, ..., then the 8 sums in ty order.
template <typename T>
__global__ void layer_norm_param_finish_kernel(const T* __restrict__ pw, const T* __restrict__ pb,
                                               T* __restrict__ dw, T* __restrict__ db,
                                               int64_t chunks, int64_t N) {
  __shared__ T sw[kRowsPerBlock][kWarpSize], sb[kRowsPerBlock][kWarpSize];
  const int tx = threadIdx.x % kWarpSize, ty = threadIdx.x / kWarpSize;
  const int64_t col = int64_t(blockIdx.x) * kWarpSize + tx;
  T aw = 0, ab = 0;
  if (col < N)
    for (int64_t c = ty; c < chunks; c += kRowsPerBlock)
      aw += pw[c * N + col], ab += pb[c * N + col];
  sw[ty][tx] = aw, sb[ty][tx] = ab;
  __syncthreads();
  if (ty != 0 || col >= N) return;
  for (int k = 1; k < kRowsPerBlock; ++k) aw += sw[k][tx], ab += sb[k][tx];
  if (dw) dw[col] = aw;
  if (db) db[col] = ab;
}

void check_input(const char* op, const Tensor& x) {
  LOOM_CHECK(
      x.dim() == 2 && x.is_contiguous() && (x.dtype() == DType::F32 || x.dtype() == DType::F64), op,
      ": x ", describe(x), " should be (M, N) contiguous float32 or float64");
}

// f(tag) with tag a value of the C++ type of `d` among T (x's type), BFloat16 and Half: the types
// a residual, a fused cast's y or its gradient may have.
template <typename T, typename F>
void with_io_type(DType d, const char* op, const F& f) {
  if (d == DTypeOf<T>::value) return f(T{});
  if (d == DType::BF16) return f(BFloat16{});
  if (d == DType::F16) return f(Half{});
  LOOM_FAIL(op, ": dtype ", dtype_name(d), " is not supported here (expected ",
            dtype_name(DTypeOf<T>::value), ", bfloat16 or float16)");
}

// f(tag) with tag a value of x's type: double for float64, else float (check_input allows only
// these two).
template <typename F>
void with_x_type(DType d, const F& f) {
  if (d == DType::F64)
    f(double{});
  else
    f(float{});
}

}  // namespace

// x: (M, N) contiguous f32/f64; extras: residual (M, N), y's dtype -> y, mean, rstd (, sum)
LayerNormOut CudaBackend::layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps,
                                     const LayerNormExtras& extras) {
  check_input("layer_norm", x);
  const Tensor& res = extras.residual;
  LOOM_CHECK(!res.defined() ||
                 (res.shape() == x.shape() && res.is_contiguous() && res.device() == x.device()),
             "layer_norm: residual ", res.defined() ? describe(res) : std::string(),
             " should be contiguous like x ", describe(x));
  const int64_t M = x.size(0), N = x.size(1);
  const Options o{.dtype = x.dtype(), .device = x.device()};
  LayerNormOut out{
      empty({M, N}, {.dtype = extras.y_dtype.value_or(x.dtype()), .device = x.device()}),
      empty({M}, o), empty({M}, o), res.defined() ? empty({M, N}, o) : Tensor()};
  if (M == 0) return out;
  const int dev = x.device().index;
  DeviceGuard g(dev);
  if (layer_norm_forward_rows(x, res, w, b, eps, out)) return out;
  const auto blocks = unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock);
  with_x_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    with_io_type<T>(res.defined() ? res.dtype() : x.dtype(), "layer_norm", [&](auto r) {
      using R = decltype(r);
      with_io_type<T>(out.y.dtype(), "layer_norm", [&](auto yt) {
        using Y = decltype(yt);
        layer_norm_forward_kernel<T, R, Y>
            <<<blocks, kRowsPerBlock * kWarpSize, 0, current_stream(dev)>>>(
                x.data<T>(), data_or_null<R>(res), data_or_null<T>(w), data_or_null<T>(b),
                res.defined() ? out.sum.data<T>() : nullptr, out.y.data<Y>(), out.mean.data<T>(),
                out.rstd.data<T>(), M, N, eps);
      });
    });
  });
  LOOM_CUDA_CHECK_LAUNCH("layer_norm_forward_kernel");
  return out;
}

namespace {

// The tensors of one backward launch: inputs, the extras, the outputs.
struct BackwardArgs {
  const Tensor &dy, &x, &w, &mean, &rstd, &add;
  LayerNormGrads& r;
  int dev;
};

// The column sums' second stage: dw, db from `rows` partial rows of pw, pb (0 rows: zeros).
template <typename T>
void finish_column_sums(const Tensor& pw, const Tensor& pb, LayerNormGrads& r, int64_t rows,
                        int64_t N, cudaStream_t s) {
  layer_norm_param_finish_kernel<T>
      <<<unsigned((N + kWarpSize - 1) / kWarpSize), kRowsPerBlock * kWarpSize, 0, s>>>(
          pw.data<T>(), pb.data<T>(), data_or_null<T>(r.grad_weight), data_or_null<T>(r.grad_bias),
          rows, N);
}

// The general backward: dx (with the extras), then the column sums in two stages (Note [Layer
// norm column sums]), the first in chunks of kChunkRows rows. L: the type of r.grad_input_low.
template <typename T, typename Y, typename L>
void backward(const BackwardArgs& a) {
  const int64_t M = a.x.size(0), N = a.x.size(1);
  cudaStream_t s = current_stream(a.dev);
  LayerNormGrads& r = a.r;
  const bool sums = r.grad_weight.defined() || r.grad_bias.defined();
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  const Options o{.dtype = a.x.dtype(), .device = a.x.device()};
  const Shape partials{std::max<int64_t>(chunks, 1), N};
  Tensor pw = sums ? empty(partials, o) : Tensor(), pb = sums ? empty(partials, o) : Tensor();
  if (M > 0)
    layer_norm_dx_kernel<T, Y, L>
        <<<unsigned((M + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * kWarpSize, 0, s>>>(
            a.dy.data<Y>(), a.x.data<T>(), data_or_null<T>(a.w), a.mean.data<T>(), a.rstd.data<T>(),
            data_or_null<T>(a.add), r.grad_input.data<T>(), data_or_null<L>(r.grad_input_low), M,
            N);
  if (sums && M > 0)
    layer_norm_param_partials_kernel<T, Y>
        <<<dim3(unsigned((N + kWarpSize - 1) / kWarpSize), unsigned(chunks)),
           kRowsPerBlock * kWarpSize, 0, s>>>(a.dy.data<Y>(), a.x.data<T>(), a.mean.data<T>(),
                                              a.rstd.data<T>(), pw.data<T>(), pb.data<T>(), M, N);
  if (sums) finish_column_sums<T>(pw, pb, r, M > 0 ? chunks : 0, N, s);
}

}  // namespace

// dy: (M, N) contiguous, x's dtype or 16-bit; x, mean, rstd: the forward's -> dx, dw, db (and
// the extras).
LayerNormGrads CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                                const Tensor& mean, const Tensor& rstd,
                                                bool need_weight, bool need_bias,
                                                const LayerNormBackwardExtras& extras) {
  check_input("layer_norm_backward", x);
  check_layer_norm_backward_extras("layer_norm_backward", extras, x);
  LOOM_CHECK(dy.shape() == x.shape() && dy.is_contiguous() && dy.device() == x.device(),
             "layer_norm_backward: grad ", describe(dy), " should be contiguous like x ",
             describe(x));
  const int64_t M = x.size(0), N = x.size(1);
  const Options o{.dtype = x.dtype(), .device = x.device()};
  LayerNormGrads r;
  r.grad_input = empty({M, N}, o);
  if (extras.grad_input_low)
    r.grad_input_low = empty({M, N}, {.dtype = *extras.grad_input_low, .device = x.device()});
  if (need_weight) r.grad_weight = empty({N}, o);
  if (need_bias) r.grad_bias = empty({N}, o);
  const int dev = x.device().index;
  DeviceGuard g(dev);
  // The fast path first (Note [Layer norm, a row in registers]): dx and the column sums' first
  // stage in one pass, one partial row per 64-row block.
  Tensor pw, pb;
  if (layer_norm_backward_rows(dy, x, w, mean, rstd, extras.grad_add, r, need_weight || need_bias,
                               pw, pb)) {
    if (need_weight || need_bias)
      finish_column_sums<float>(pw, pb, r, pw.size(0), N, current_stream(dev));
    LOOM_CUDA_CHECK_LAUNCH("layer_norm_backward kernels");
    return r;
  }
  const BackwardArgs a{dy, x, w, mean, rstd, extras.grad_add, r, dev};
  with_x_type(x.dtype(), [&](auto t) {
    using T = decltype(t);
    with_io_type<T>(dy.dtype(), "layer_norm_backward", [&](auto yt) {
      using Y = decltype(yt);
      with_io_type<T>(extras.grad_input_low.value_or(x.dtype()), "layer_norm_backward",
                      [&](auto lt) {
                        using L = decltype(lt);
                        backward<T, Y, L>(a);
                      });
    });
  });
  LOOM_CUDA_CHECK_LAUNCH("layer_norm_backward kernels");
  return r;
}

}  // namespace loom::cuda
