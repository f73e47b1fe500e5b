// CUDA max and average pooling over the H, W planes of NCHW tensors, forward and backward, with
// the CPU backend's semantics (kernels/cpu/cpu_pool.cpp): max pooling pads with -inf, returns the
// argmax as an index into each H*W plane (first maximum wins, a NaN wins at once); average
// pooling divides by the window clipped to the padded input (count_include_pad) or the real one.
// One thread per output element forward. Backward: average pooling gathers per input element
// (Note [Pool gather]); max pooling scatters by the saved indices (Note [Max pool scatter]).
// Leaves out: ceil_mode, dilation, NHWC layouts, cuDNN's pooling.
#include <algorithm>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/functors.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Max pool scatter]
// max_pool2d_backward gets the indices but not the window geometry, so it scatters: one thread per
// output adds its gradient at its argmax with an atomic add. When windows do not overlap
// (stride >= kernel, the usual 2x2/2) each input receives at most one add and the result is
// exact and deterministic; with overlapping windows the few adds into one element may come in
// any order (float rounding may then differ between runs in the last bit).
//
// Note [Pool gather]
// A backward pass that scatters (each output adds into its window) needs atomics where windows
// overlap, and float atomics make the sum order, hence the result, vary from run to run. Instead
// each thread owns one input element and sums the outputs whose window covers it: outputs
// p in [p_lo, p_hi) with p_lo = (h + pad - k) / stride + 1 (0 when h + pad < k) and
// p_hi = min((h + pad) / stride + 1, P). Deterministic, no atomics, no zero-fill pass.

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t(1) << 20));
}

#define LOOM_GRID_STRIDE(i, n)                                              \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// x: (planes, H, W) -> y, idx: (planes, P, Q)
template <typename T>
__global__ void max_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                  int64_t* __restrict__ idx, PoolGeom g) {
  using A = acc_t<T>;
  LOOM_GRID_STRIDE(o, g.planes * g.P * g.Q) {
    int64_t q = o % g.Q, t = o / g.Q, p = t % g.P, plane = t / g.P;
    const T* xp = x + plane * g.H * g.W;
    int64_t h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;
    int64_t h1 = min(h0 + g.kh, g.H), w1 = min(w0 + g.kw, g.W);
    h0 = max(h0, int64_t(0)), w0 = max(w0, int64_t(0));
    A best = -INFINITY;
    int64_t arg = h0 * g.W + w0;  // the first real element, if all are -inf
    bool nan = false;
    for (int64_t h = h0; h < h1 && !nan; ++h)
      for (int64_t w = w0; w < w1 && !nan; ++w) {
        A v = A(xp[h * g.W + w]);
        nan = v != v;
        if (v > best || nan) {
          best = v;
          arg = h * g.W + w;
        }
      }
    y[o] = T(best);
    idx[o] = arg;
  }
}

// gy, idx: (planes, P, Q) -> gx: (planes, H, W), zeroed first, in the accumulate type: float
// atomics for f32/f16/bf16 (the half types are converted afterwards), double atomics for f64.
template <typename T>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ gy,
                                           const int64_t* __restrict__ idx,
                                           acc_t<T>* __restrict__ gx, int64_t planes, int64_t PQ,
                                           int64_t HW) {
  LOOM_GRID_STRIDE(o, planes * PQ) {
    int64_t plane = o / PQ;
    atomicAdd(gx + plane * HW + idx[o], acc_t<T>(gy[o]));
  }
}

template <typename T>
__global__ void cast_from_float_kernel(const float* __restrict__ src, T* __restrict__ dst,
                                       int64_t n) {
  LOOM_GRID_STRIDE(i, n) dst[i] = T(src[i]);
}

// The divisor of output (p, q): its window clipped to the padded input, or to the real input.
__device__ inline int64_t avg_divisor(const PoolGeom& g, int64_t p, int64_t q, bool include_pad) {
  int64_t h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;
  int64_t h1 = min(h0 + g.kh, g.H + g.ph), w1 = min(w0 + g.kw, g.W + g.pw);
  if (include_pad) return (h1 - h0) * (w1 - w0);
  h0 = max(h0, int64_t(0)), w0 = max(w0, int64_t(0));
  h1 = min(h1, g.H), w1 = min(w1, g.W);
  return (h1 - h0) * (w1 - w0);
}

// x: (planes, H, W) -> y: (planes, P, Q)
template <typename T>
__global__ void avg_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y, PoolGeom g,
                                  bool include_pad) {
  using A = acc_t<T>;
  LOOM_GRID_STRIDE(o, g.planes * g.P * g.Q) {
    int64_t q = o % g.Q, t = o / g.Q, p = t % g.P, plane = t / g.P;
    const T* xp = x + plane * g.H * g.W;
    int64_t h0 = max(p * g.sh - g.ph, int64_t(0)), w0 = max(q * g.sw - g.pw, int64_t(0));
    int64_t h1 = min(p * g.sh - g.ph + g.kh, g.H), w1 = min(q * g.sw - g.pw + g.kw, g.W);
    A s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += A(xp[h * g.W + w]);
    y[o] = T(s / A(avg_divisor(g, p, q, include_pad)));
  }
}

// gy: (planes, P, Q) -> gx: (planes, H, W)
template <typename T>
__global__ void avg_pool2d_backward_kernel(const T* __restrict__ gy, T* __restrict__ gx, PoolGeom g,
                                           bool include_pad) {
  using A = acc_t<T>;
  LOOM_GRID_STRIDE(i, g.planes * g.H * g.W) {
    int64_t hw = i % (g.H * g.W), plane = i / (g.H * g.W);
    int64_t h = hw / g.W, w = hw % g.W;
    int64_t p0 = h + g.ph < g.kh ? 0 : (h + g.ph - g.kh) / g.sh + 1;
    int64_t p1 = min((h + g.ph) / g.sh + 1, g.P);
    int64_t q0 = w + g.pw < g.kw ? 0 : (w + g.pw - g.kw) / g.sw + 1;
    int64_t q1 = min((w + g.pw) / g.sw + 1, g.Q);
    const T* gyp = gy + plane * g.P * g.Q;
    A s = 0;
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t q = q0; q < q1; ++q)
        s += A(gyp[p * g.Q + q]) / A(avg_divisor(g, p, q, include_pad));
    gx[i] = T(s);
  }
}

}  // namespace

// x: (N, C, H, W) -> (values (N, C, P, Q), int64 indices into each H*W plane)
std::pair<Tensor, Tensor> CudaBackend::max_pool2d(const Tensor& x0, const Pool2dParams& p) {
  PoolGeom g = pool_geom(x0.shape(), p);
  Tensor x = raw::contiguous(x0);
  Shape os{x.size(0), x.size(1), g.P, g.Q};
  Tensor y = empty(os, {.dtype = x.dtype(), .device = x.device()});
  Tensor idx = empty(os, {.dtype = DType::I64, .device = x.device()});
  if (y.numel() == 0) return {y, idx};
  int dev = x.device().index;
  DeviceGuard guard(dev);
  LOOM_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    max_pool2d_kernel<scalar_t><<<blocks_for(y.numel()), kThreads, 0, current_stream(dev)>>>(
        x.data<scalar_t>(), y.data<scalar_t>(), idx.data<int64_t>(), g);
    LOOM_CUDA_CHECK_LAUNCH("max_pool2d_kernel");
  });
  return {y, idx};
}

// grad_y, indices: (N, C, P, Q) -> (N, C, H, W) = x_shape
Tensor CudaBackend::max_pool2d_backward(const Tensor& grad_y0, const Tensor& indices0,
                                        const Shape& x_shape) {
  Tensor gy = raw::contiguous(grad_y0), idx = raw::contiguous(indices0);
  Tensor gx = empty(x_shape, {.dtype = gy.dtype(), .device = gy.device()});
  if (gx.numel() == 0) return gx;
  int dev = gy.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  int64_t planes = x_shape[0] * x_shape[1], HW = x_shape[2] * x_shape[3];
  int64_t PQ = gy.dim() == 4 ? gy.size(2) * gy.size(3) : 0;
  bool half = gy.dtype() == DType::F16 || gy.dtype() == DType::BF16;
  Tensor acc = half ? empty(x_shape, {.dtype = DType::F32, .device = gy.device()}) : gx;
  LOOM_CUDA_CHECK(
      cudaMemsetAsync(acc.data_ptr(), 0, size_t(acc.numel()) * acc.element_size(), stream));
  if (gy.numel() > 0) {
    LOOM_DISPATCH_FLOATING(gy.dtype(), "max_pool2d_backward", [&] {
      max_pool2d_backward_kernel<scalar_t><<<blocks_for(gy.numel()), kThreads, 0, stream>>>(
          gy.data<scalar_t>(), idx.data<int64_t>(), static_cast<acc_t<scalar_t>*>(acc.data_ptr()),
          planes, PQ, HW);
      LOOM_CUDA_CHECK_LAUNCH("max_pool2d_backward_kernel");
    });
  }
  if (half) {
    LOOM_DISPATCH_FLOATING(gy.dtype(), "max_pool2d_backward", [&] {
      cast_from_float_kernel<scalar_t><<<blocks_for(gx.numel()), kThreads, 0, stream>>>(
          acc.data<float>(), gx.data<scalar_t>(), gx.numel());
      LOOM_CUDA_CHECK_LAUNCH("cast_from_float_kernel");
    });
  }
  return gx;
}

// x: (N, C, H, W) -> (N, C, P, Q)
Tensor CudaBackend::avg_pool2d(const Tensor& x0, const Pool2dParams& p) {
  PoolGeom g = pool_geom(x0.shape(), p);
  Tensor x = raw::contiguous(x0);
  Tensor y = empty({x.size(0), x.size(1), g.P, g.Q}, {.dtype = x.dtype(), .device = x.device()});
  if (y.numel() == 0) return y;
  int dev = x.device().index;
  DeviceGuard guard(dev);
  LOOM_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    avg_pool2d_kernel<scalar_t><<<blocks_for(y.numel()), kThreads, 0, current_stream(dev)>>>(
        x.data<scalar_t>(), y.data<scalar_t>(), g, p.count_include_pad);
    LOOM_CUDA_CHECK_LAUNCH("avg_pool2d_kernel");
  });
  return y;
}

// grad_y: (N, C, P, Q) -> (N, C, H, W) = x_shape
Tensor CudaBackend::avg_pool2d_backward(const Tensor& grad_y0, const Shape& x_shape,
                                        const Pool2dParams& p) {
  PoolGeom g = pool_geom(x_shape, p);
  Tensor gy = raw::contiguous(grad_y0);
  Tensor gx = empty(x_shape, {.dtype = gy.dtype(), .device = gy.device()});
  if (gx.numel() == 0) return gx;
  int dev = gy.device().index;
  DeviceGuard guard(dev);
  LOOM_DISPATCH_FLOATING(gy.dtype(), "avg_pool2d_backward", [&] {
    avg_pool2d_backward_kernel<scalar_t>
        <<<blocks_for(gx.numel()), kThreads, 0, current_stream(dev)>>>(
            gy.data<scalar_t>(), gx.data<scalar_t>(), g, p.count_include_pad);
    LOOM_CUDA_CHECK_LAUNCH("avg_pool2d_backward_kernel");
  });
  return gx;
}

}  // namespace loom::cuda
