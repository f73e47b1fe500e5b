// CUDA softmax / log_softmax (forward and backward along any dim) and the negative log-likelihood
// loss (forward and backward), with the contracts of kernels/cpu/cpu_softmax_loss.cpp: ignored
// rows give 0 and are left out of Mean's count; Mean over no rows is NaN.
// Leaves out: class weights and label smoothing (not in the Backend contract).
#include <limits>
#include <string>
#include <string_view>

#include "core/cuda/check.h"
#include "core/cuda/device_error.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

// Note [Online softmax]
// Each row is read twice: once to find its max m and the sum s = sum_j exp(x_j - m), once to
// write y. The first pass keeps a running (m, s) per thread: a new value v > m rescales the sum,
// s = s * exp(m - v) + 1, m = v; partial (m, s) pairs from other lanes merge the same way. This
// needs one pass instead of two (max, then sum). Rows of up to 1024 elements take one warp each,
// longer rows one block each. dim other than the last is handled as on the CPU: permute dim last,
// copy contiguous, process rows, permute back (see Note [Softmax layout] in the CPU file).

namespace {

template <typename A>
struct MaxSum {
  A m, s;
};

template <typename A>
__device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  const A ninf = -std::numeric_limits<A>::infinity();
  A m = b.m > a.m ? b.m : a.m;
  A sa = a.m == ninf ? A(0) : a.s * math::exp(a.m - m);
  A sb = b.m == ninf ? A(0) : b.s * math::exp(b.m - m);
  return {m, sa + sb};
}

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_merge(MaxSum<A> v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1)
    v = merge(
        v, MaxSum<A>{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  return v;
}

template <typename A>
__device__ __forceinline__ MaxSum<A> block_merge(MaxSum<A> v) {
  __shared__ A sm[kWarpSize], ss[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize,
            nwarps = blockDim.x / kWarpSize;
  v = warp_merge(v);
  if (lane == 0) {
    sm[warp] = v.m;
    ss[warp] = v.s;
  }
  __syncthreads();
  v = lane < nwarps ? MaxSum<A>{sm[lane], ss[lane]}
                    : MaxSum<A>{-std::numeric_limits<A>::infinity(), A(0)};
  return warp_merge(v);
}

// The row a thread works on when a warp (per_warp) or a block takes each row, the thread's place
// tid among the nt threads of that row.
struct RowThread {
  int64_t row;
  int tid, nt;
};
__device__ __forceinline__ RowThread row_thread(bool per_warp) {
  if (per_warp)
    return {int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize,
            int(threadIdx.x % kWarpSize), kWarpSize};
  return {int64_t(blockIdx.x), int(threadIdx.x), int(blockDim.x)};
}

// One row per warp (per_warp) or per block, of contiguous (rows, n) blocks.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    softmax_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log, bool per_warp) {
  using A = acc_t<T>;
  const auto [row, tid, nt] = row_thread(per_warp);
  if (row >= rows) return;
  const T* xr = x + row * n;
  T* yr = y + row * n;
  MaxSum<A> ms{-std::numeric_limits<A>::infinity(), A(0)};
  for (int64_t j = tid; j < n; j += nt) ms = merge(ms, MaxSum<A>{A(xr[j]), A(1)});
  ms = per_warp ? warp_merge(ms) : block_merge(ms);
  if (log) {
    const A lse = ms.m + math::log(ms.s);
    for (int64_t j = tid; j < n; j += nt) yr[j] = T(A(xr[j]) - lse);
  } else {
    const A inv = A(1) / ms.s;
    for (int64_t j = tid; j < n; j += nt) yr[j] = T(math::exp(A(xr[j]) - ms.m) * inv);
  }
}

// dx = y * (dy - sum(dy * y)) for softmax; dx = dy - exp(y) * sum(dy) for log_softmax.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t rows, int64_t n, bool log,
                            bool per_warp) {
  using A = acc_t<T>;
  const auto [row, tid, nt] = row_thread(per_warp);
  if (row >= rows) return;
  const int64_t base = row * n;
  A s = 0;
  for (int64_t j = tid; j < n; j += nt)
    s += log ? A(dy[base + j]) : A(dy[base + j]) * A(y[base + j]);
  s = per_warp ? warp_reduce(s, Plus{}) : block_reduce(s, Plus{}, A(0));
  for (int64_t j = tid; j < n; j += nt) {
    A g = A(dy[base + j]), yv = A(y[base + j]);
    dx[base + j] = T(log ? g - math::exp(yv) * s : yv * (g - s));
  }
}

// The references: one thread per row, plain passes.
template <typename T>
__global__ void naive_softmax_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  using A = acc_t<T>;
  int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* xr = x + row * n;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = 0; j < n; ++j) m = A(xr[j]) > m ? A(xr[j]) : m;
  A s = 0;
  for (int64_t j = 0; j < n; ++j) s += math::exp(A(xr[j]) - m);
  for (int64_t j = 0; j < n; ++j)
    y[row * n + j] = T(log ? A(xr[j]) - m - math::log(s) : math::exp(A(xr[j]) - m) / s);
}

template <typename T>
__global__ void naive_softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t rows,
                                              int64_t n, bool log) {
  using A = acc_t<T>;
  int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int64_t b = row * n;
  A s = 0;
  for (int64_t j = 0; j < n; ++j) s += log ? A(dy[b + j]) : A(dy[b + j]) * A(y[b + j]);
  for (int64_t j = 0; j < n; ++j)
    dx[b + j] =
        T(log ? A(dy[b + j]) - math::exp(A(y[b + j])) * s : A(y[b + j]) * (A(dy[b + j]) - s));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Launch geometry for row kernels: warps for short rows, blocks for long ones.
struct RowLaunch {
  int64_t grid;
  bool per_warp;
};
RowLaunch row_launch(int64_t rows, int64_t n) {
  if (n <= 1024) return {ceil_div(rows, kBlockSize / kWarpSize), true};
  return {rows, false};
}

}  // namespace

// x: any shape -> softmax or log_softmax along dim, same shape (contiguous)
Tensor CudaBackend::softmax(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  if (x.dim() > 0) dim = wrap_dim(name, dim, x.dim());
  const int dev = x.device().index;
  DeviceGuard g(dev);
  return along_dim(
      {x}, dim, [&](const std::vector<Tensor>& c, const Tensor& out, int64_t rows, int64_t n) {
        cudaStream_t s = current_stream(dev);
        LOOM_DISPATCH_FLOATING(x.dtype(), name, [&] {
          const scalar_t* xp = c[0].data<scalar_t>();
          scalar_t* yp = out.data<scalar_t>();
          if (use_naive_kernels()) {
            naive_softmax_kernel<scalar_t>
                <<<ceil_div(rows, kBlockSize), kBlockSize, 0, s>>>(xp, yp, rows, n, log);
          } else {
            RowLaunch l = row_launch(rows, n);
            softmax_kernel<scalar_t>
                <<<l.grid, kBlockSize, 0, s>>>(xp, yp, rows, n, log, l.per_warp);
          }
        });
        LOOM_CUDA_CHECK_LAUNCH("softmax_kernel");
      });
}

// grad_y, y: same shape and dtype -> dL/dx, same shape (contiguous)
Tensor CudaBackend::softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  LOOM_CHECK(grad_y.shape() == y.shape() && grad_y.dtype() == y.dtype(), name, ": grad ",
             describe(grad_y), " does not match the output ", describe(y));
  if (y.dim() > 0) dim = wrap_dim(name, dim, y.dim());
  const int dev = y.device().index;
  DeviceGuard g(dev);
  return along_dim({grad_y, y}, dim,
                   [&](const std::vector<Tensor>& c, const Tensor& out, int64_t rows, int64_t n) {
                     cudaStream_t s = current_stream(dev);
                     LOOM_DISPATCH_FLOATING(y.dtype(), name, [&] {
                       const scalar_t* dyp = c[0].data<scalar_t>();
                       const scalar_t* yp = c[1].data<scalar_t>();
                       scalar_t* dxp = out.data<scalar_t>();
                       if (use_naive_kernels()) {
                         naive_softmax_backward_kernel<scalar_t>
                             <<<ceil_div(rows, kBlockSize), kBlockSize, 0, s>>>(dyp, yp, dxp, rows,
                                                                                n, log);
                       } else {
                         RowLaunch l = row_launch(rows, n);
                         softmax_backward_kernel<scalar_t>
                             <<<l.grid, kBlockSize, 0, s>>>(dyp, yp, dxp, rows, n, log, l.per_warp);
                       }
                     });
                     LOOM_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
                   });
}

namespace {

// Note [nll_loss on the GPU]
// Mean and Sum reduce in one block with a double accumulator (as the CPU's serial double sum),
// so the result is deterministic; None writes one value per row from a grid of threads.
// Targets outside [0, C) other than ignore_index are skipped and reported (device_error.h).

template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    nll_loss_kernel(const T* logp, int64_t s0, int64_t s1, const int64_t* target, int64_t ts,
                    int64_t N, int64_t C, int64_t ignore, T* out, Reduction r, DeviceErrorSlot* err,
                    DeviceOp err_op) {
  using A = acc_t<T>;
  double total = 0, count = 0;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N; i += step) {
    const int64_t t = target[i * ts];
    double v = 0;
    if (t != ignore) {
      if (t < 0 || t >= C) {
        report_device_error(err, err_op, t, i, C);
      } else {
        v = -double(A(logp[i * s0 + t * s1]));
        count += 1;
      }
    }
    total += v;
    if (r == Reduction::None) out[i] = T(A(v));
  }
  if (r == Reduction::None) return;  // uniform: no thread reaches the block reduction
  total = block_reduce(total, Plus{}, 0.0);
  count = block_reduce(count, Plus{}, 0.0);
  if (threadIdx.x == 0) out[0] = T(A(r == Reduction::Sum ? total : total / count));
}

// Mean's scale 1 / (number of non-ignored rows), in one block.
__global__ void __launch_bounds__(kBlockSize)
    nll_count_kernel(const int64_t* target, int64_t ts, int64_t N, int64_t ignore, double* scale) {
  double count = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) count += target[i * ts] != ignore;
  count = block_reduce(count, Plus{}, 0.0);
  if (threadIdx.x == 0) *scale = 1.0 / count;
}

// out (N, C) contiguous: -grad * scale at each row's target, 0 elsewhere.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    nll_loss_backward_kernel(const T* grad, int64_t gs, const int64_t* target, int64_t ts,
                             int64_t N, int64_t C, int64_t ignore, const double* scale, T* out,
                             DeviceErrorSlot* err, DeviceOp err_op) {
  using A = acc_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * C; e += step) {
    const int64_t i = e / C, j = e - i * C;
    const int64_t t = target[i * ts];
    A v = A(0);
    if (t != ignore && (t < 0 || t >= C)) {
      if (j == 0) report_device_error(err, err_op, t, i, C);
    } else if (t == j && t != ignore) {  // an ignore_index inside [0, C) is a class: its rows get 0
      const double sc = scale ? *scale : 1.0;
      v = A(-double(A(grad[i * gs])) * sc);
    }
    out[e] = T(v);
  }
}

// The name a target found out of range by a kernel is reported under (device_error.cpp).
DeviceOp loss_device_op(const char* op, bool backward) {
  const bool ce = std::string_view(op) == "cross_entropy";
  if (backward) return ce ? DeviceOp::CrossEntropyBackward : DeviceOp::NllLossBackward;
  return ce ? DeviceOp::CrossEntropy : DeviceOp::NllLoss;
}

// `op` + `suffix` name the op ("nll_loss" + "_backward"), joined only when a check fails.
void check_target(const char* op, const char* suffix, const Tensor& logp, const Tensor& target) {
  LOOM_CHECK(target.dtype() == DType::I64 && target.dim() == 1, op, suffix,
             ": target must be a 1-d int64 tensor, got ", describe(target));
  LOOM_CHECK(logp.dim() == 2 && logp.size(0) == target.size(0), op, suffix, ": logp ",
             describe(logp), " must be (N, C) with N = ", target.size(0), " rows to match target");
  LOOM_CHECK(target.device() == logp.device(), op, suffix, ": target ", describe(target),
             " is not on the device of logp ", describe(logp));
}

}  // namespace

// logp: (N, C), target: (N) int64 -> 0-d (Mean, Sum) or (N) (None; 0 at ignored rows)
Tensor CudaBackend::nll_loss(const Tensor& logp, const Tensor& target, Reduction r,
                             int64_t ignore_index, const char* op) {
  check_target(op, "", logp, target);
  const int64_t N = logp.size(0), C = logp.size(1);
  Tensor out = empty(r == Reduction::None ? Shape{N} : Shape{},
                     {.dtype = logp.dtype(), .device = logp.device()});
  const int dev = logp.device().index;
  DeviceGuard g(dev);
  if (N == 0) {
    if (r != Reduction::None)
      fill_(out, r == Reduction::Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return out;
  }
  cudaStream_t s = current_stream(dev);
  const int64_t grid = r == Reduction::None ? grid_for(N, dev) : 1;
  LOOM_DISPATCH_FLOATING(logp.dtype(), "nll_loss", [&] {
    nll_loss_kernel<scalar_t><<<grid, kBlockSize, 0, s>>>(
        logp.data<scalar_t>(), logp.stride(0), logp.stride(1), target.data<int64_t>(),
        target.stride(0), N, C, ignore_index, out.data<scalar_t>(), r, device_error_slot(dev),
        loss_device_op(op, false));
  });
  LOOM_CUDA_CHECK_LAUNCH("nll_loss_kernel");
  return out;
}

// grad: 0-d (Mean, Sum) or (N) (None), logp: (N, C), target: (N) -> dL/dlogp: (N, C)
Tensor CudaBackend::nll_loss_backward(const Tensor& grad, const Tensor& logp, const Tensor& target,
                                      Reduction r, int64_t ignore_index, const char* op) {
  check_target(op, "_backward", logp, target);
  const int64_t N = logp.size(0), C = logp.size(1);
  LOOM_CHECK(r == Reduction::None ? (grad.dim() == 1 && grad.size(0) == N) : grad.numel() == 1, op,
             "_backward: grad ", describe(grad), " does not fit the reduction of ", N, " rows");
  Tensor out = empty({N, C}, {.dtype = logp.dtype(), .device = logp.device()});
  if (N * C == 0) return out;
  const int dev = logp.device().index;
  DeviceGuard g(dev);
  cudaStream_t s = current_stream(dev);
  Tensor gc = raw::cast(grad, logp.dtype());
  Tensor scale;
  if (r == Reduction::Mean) {
    scale = empty({}, {.dtype = DType::F64, .device = logp.device()});
    nll_count_kernel<<<1, kBlockSize, 0, s>>>(target.data<int64_t>(), target.stride(0), N,
                                              ignore_index, scale.data<double>());
    LOOM_CUDA_CHECK_LAUNCH("nll_count_kernel");
  }
  const int64_t gs = r == Reduction::None ? gc.stride(0) : 0;
  LOOM_DISPATCH_FLOATING(logp.dtype(), "nll_loss_backward", [&] {
    nll_loss_backward_kernel<scalar_t><<<grid_for(N * C, dev), kBlockSize, 0, s>>>(
        gc.data<scalar_t>(), gs, target.data<int64_t>(), target.stride(0), N, C, ignore_index,
        data_or_null<double>(scale), out.data<scalar_t>(), device_error_slot(dev),
        loss_device_op(op, true));
  });
  LOOM_CUDA_CHECK_LAUNCH("nll_loss_backward_kernel");
  return out;
}

}  // namespace loom::cuda
