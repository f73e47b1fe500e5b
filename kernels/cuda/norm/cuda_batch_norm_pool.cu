// CUDA BatchNorm (batch statistics) + ReLU + MaxPool2d(2) as one op on NCHW x (N, C, H, W) with
// even H and W: the forward writes only the pooled output, the backward reads only the pooled
// gradient (Note [Batch norm into max pool]). The statistics and both finalize steps are batch
// norm's own (bn_coefficients, bn_backward_finalize in cuda_batch_norm.cu); this file has the three
// passes over the activation that replace batch norm's apply pass and the max pooling.
// The naive version is the composition it replaces (batch_norm with relu, then max_pool2d), which
// the op layer runs everywhere else (autograd/ops/norm.cpp) and the tests compare against.
// Leaves out: channels-last, odd H or W, eval mode (the op layer composes there).
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/norm/cuda_batch_norm.h"
#include "kernels/cuda/norm/cuda_batch_norm_finalize.cuh"
#include "kernels/functors.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Batch norm into max pool]
// In the cnn workload two of the three BatchNorm2d + ReLU layers feed a MaxPool2d(2). Composed,
// the forward writes the activation y (N, C, H, W) and the pooling reads it again and writes the
// pooled output and an int64 argmax per output; the backward writes a full-size gradient from the
// pooled one, and batch norm's backward reads that gradient in both of its passes. The pooled
// output's window (2p..2p+1, 2q..2q+1) can instead be computed straight from x: each of the four
// values exactly as batch norm's apply pass computes it (y = T(max(fma(x - mean, scale, shift),
// 0)), Note [ReLU mask from x]), and the first maximum wins, as in max_pool2d (after the ReLU no
// value is NaN). The backward recomputes the same four values from x and the saved statistics,
// so the argmax and the ReLU's mask are bit for bit the forward's without storing either: the
// batch-norm input gradient is dy = g at the argmax when its value is > 0, else 0. Per layer,
// with X the activation's bytes, the forward moves 2.25 X (statistics; one pass reading x and
// writing the pooled output) instead of 4.75 X (statistics, apply, pooling with its int64
// argmax: 0.5 X for float32), and the backward 3.5 X (two passes reading x and the pooled
// gradient, dx written once) instead of 6.75 X (the pooling's scatter into a full gradient, then
// batch norm's two passes reading it and x). For the cnn's second layer (X = 51 MB) that is
// 0.13 GB less per step.

constexpr int kThreads = 256;

// x (N, C, H, W) with even H, W; the output (N, C, P, Q), P = H / 2, Q = W / 2. I: the index type.
template <typename I>
struct Pool2Geom {
  I C, H, W, P, Q;
};

// Output o of (N, C, P, Q): its plane (n C + c), window row p and column q, and channel c.
template <typename I>
struct Pool2Pos {
  I plane, p, q, c;
  __device__ Pool2Pos(I o, const Pool2Geom<I>& g) {
    const I PQ = g.P * g.Q;
    plane = o / PQ;
    const I pq = o - plane * PQ;
    p = pq / g.Q, q = pq - p * g.Q, c = plane % g.C;
  }
};

// The four values of output (p, q)'s window of plane `plane`, row-major, read as two pairs when
// V = 2 (W even and x aligned to a pair).
template <typename T, int V, typename I>
__device__ __forceinline__ void load_window(const T* __restrict__ x, I plane, I p, I q,
                                            const Pool2Geom<I>& g, T v[4]) {
  const T* xp = x + int64_t(plane) * g.H * g.W;
  const I top = 2 * p * g.W + 2 * q;
  if constexpr (V == 2) {
    const Vec<T, 2> r0 = load_vec<2>(xp, top / 2), r1 = load_vec<2>(xp, (top + g.W) / 2);
    v[0] = r0.v[0], v[1] = r0.v[1], v[2] = r1.v[0], v[3] = r1.v[1];
  } else {
    v[0] = xp[top], v[1] = xp[top + 1], v[2] = xp[top + g.W], v[3] = xp[top + g.W + 1];
  }
}

// The window's winner (0..3, row-major) and its value: y_k = T(max(pre_k, 0)) as batch norm's
// apply pass rounds it, the first maximum winning as in max_pool2d.
template <typename T, typename A>
__device__ __forceinline__ int window_argmax(const T v[4], A mean, A scale, A shift, A& best) {
  int arg = 0;
  best = A(-INFINITY);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const A pre = bn_pre(A(v[k]), mean, scale, shift);
    const A y = A(T(!(pre > A(0)) ? A(0) : pre));
    if (y > best) best = y, arg = k;
  }
  return arg;
}

// The one-thread-per-output walk of the forward and the backward's apply pass: calls
// f(o, at, v) for each output o this thread takes (grid-stride over total), at its position and
// v the four cells of its window in x.
template <typename T, int V, typename I, typename F>
__device__ __forceinline__ void for_each_window(const T* __restrict__ x, I total,
                                                const Pool2Geom<I>& g, const F& f) {
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < total;
       o += I(gridDim.x) * I(blockDim.x)) {
    const Pool2Pos<I> at(o, g);
    T v[4];
    load_window<T, V>(x, at.plane, at.p, at.q, g, v);
    f(o, at, v);
  }
}

// x (N, C, H, W) -> out (N, C, P, Q): one thread per output.
template <typename T, int V, typename I>
__global__ void bn_relu_pool2_kernel(const T* __restrict__ x, T* __restrict__ out,
                                     const acc_t<T>* __restrict__ mean,
                                     const acc_t<T>* __restrict__ scale,
                                     const acc_t<T>* __restrict__ shift, I total, Pool2Geom<I> g) {
  using A = acc_t<T>;
  for_each_window<T, V>(x, total, g, [&](I o, const Pool2Pos<I>& at, const T* v) {
    const I c = at.c;
    A best;
    window_argmax<T, A>(v, mean[c], scale[c], shift[c], best);
    out[o] = T(best);
  });
}

// gout (N, C, P, Q), x -> partial sums (C, S) of dy and dy (x - mean), dy the gradient batch norm's
// output receives (Note [Batch norm into max pool]); block (s, c) takes the s-th share of channel
// c's N P Q outputs.
template <typename T, int V, typename I>
__global__ void bn_relu_pool2_backward_partial_kernel(const T* __restrict__ gout,
                                                      const T* __restrict__ x, ReluFromX<T> r,
                                                      Pool2Geom<I> g, I N,
                                                      const acc_t<T>* __restrict__ mean,
                                                      acc_t<T>* psdy, acc_t<T>* psdyx) {
  using A = acc_t<T>;
  const I c = I(blockIdx.y), s = I(blockIdx.x), S = I(gridDim.x), PQ = g.P * g.Q, M = N * PQ;
  const I chunk = (M + S - 1) / S, t0 = s * chunk, t1 = min(M, t0 + chunk);
  const A m = mean[c], a = r.scale(c), b = r.shift(c);
  A sdy = 0, sdyx = 0;
  for (I t = t0 + I(threadIdx.x); t < t1; t += I(blockDim.x)) {
    const I n = t / PQ, pq = t - n * PQ, p = pq / g.Q, q = pq - p * g.Q, plane = n * g.C + c;
    T v[4];
    load_window<T, V>(x, plane, p, q, g, v);
    A best;
    const int arg = window_argmax<T, A>(v, m, a, b, best);
    const A d = best > A(0) ? A(gout[int64_t(plane) * PQ + pq]) : A(0);
    sdy += d;
    sdyx += d * (A(v[arg]) - m);
  }
  auto add = [](A u, A w) { return u + w; };
  sdy = block_reduce(sdy, add, A(0));
  sdyx = block_reduce(sdyx, add, A(0));
  if (threadIdx.x == 0) psdy[int64_t(c) * S + s] = sdy, psdyx[int64_t(c) * S + s] = sdyx;
}

// dx = k[c] (dy - off[c] - (x - mean[c]) slope[c]) over each window, dy as in the partial pass:
// one thread per output writes its four cells.
template <typename T, int V, typename I>
__global__ void bn_relu_pool2_backward_apply_kernel(
    const T* __restrict__ gout, const T* __restrict__ x, ReluFromX<T> r, T* __restrict__ gx,
    const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ k,
    const acc_t<T>* __restrict__ off, const acc_t<T>* __restrict__ slope, I total, Pool2Geom<I> g) {
  using A = acc_t<T>;
  for_each_window<T, V>(x, total, g, [&](I o, const Pool2Pos<I>& at, const T* v) {
    const I c = at.c;
    const A m = mean[c];
    A best;
    const int arg = window_argmax<T, A>(v, m, r.scale(c), r.shift(c), best);
    const A d = best > A(0) ? A(gout[o]) : A(0);
    const A kc = k[c], oc = off[c], sc = slope[c];
    T out[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = T(kc * ((j == arg ? d : A(0)) - oc - (A(v[j]) - m) * sc));
    T* gp = gx + int64_t(at.plane) * g.H * g.W;
    const I top = 2 * at.p * g.W + 2 * at.q;
    if constexpr (V == 2) {
      reinterpret_cast<Vec<T, 2>*>(gp)[top / 2] = Vec<T, 2>{{out[0], out[1]}};
      reinterpret_cast<Vec<T, 2>*>(gp)[(top + g.W) / 2] = Vec<T, 2>{{out[2], out[3]}};
    } else {
      gp[top] = out[0], gp[top + 1] = out[1], gp[top + g.W] = out[2], gp[top + g.W + 1] = out[3];
    }
  });
}

DType acc_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

void check_input(const char* op, const Tensor& x) {
  check_batch_norm_pool2_input(op, x);
  LOOM_CHECK(x.size(1) <= 65535, op, ": input ", x.shape(), " has ", x.size(1),
             " channels; the CUDA kernels handle at most 65535");
}

// Calls f(V, I): V = 2 when x (and gx, when given) are aligned to a pair, I = int32_t when every
// index of x fits.
template <typename T, typename F>
void with_pool2_kernel(const Tensor& x, const Tensor& gx, const F& f) {
  const bool pairs = aligned_to(x.data_ptr(), 2 * sizeof(T)) &&
                     (!gx.defined() || aligned_to(gx.data_ptr(), 2 * sizeof(T)));
  const bool small = x.numel() < (int64_t(1) << 31);
  auto with_index = [&](auto V) {
    if (small)
      f(V, int32_t{});
    else
      f(V, int64_t{});
  };
  if (pairs)
    with_index(std::integral_constant<int, 2>{});
  else
    with_index(std::integral_constant<int, 1>{});
}

template <typename I>
Pool2Geom<I> pool2_geom(const Tensor& x) {
  return {I(x.size(1)), I(x.size(2)), I(x.size(3)), I(x.size(2) / 2), I(x.size(3) / 2)};
}

}  // namespace

BatchNormOut CudaBackend::batch_norm_relu_max_pool2(const Tensor& x0, const Tensor& weight0,
                                                    const Tensor& bias0, const Tensor& running_mean,
                                                    const Tensor& running_var, double momentum,
                                                    double eps) {
  check_input("batch_norm_relu_max_pool2", x0);
  Tensor x = raw::contiguous(x0);
  int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  BnCoefficients k =
      bn_coefficients(x, weight0, bias0, running_mean, running_var, true, momentum, eps);
  BatchNormOut o;
  o.y = empty({x.size(0), x.size(1), x.size(2) / 2, x.size(3) / 2},
              {.dtype = x.dtype(), .device = x.device()});
  o.save_mean = k.mean;
  o.save_invstd = k.invstd;
  if (o.y.numel() == 0) return o;
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_relu_max_pool2", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    with_pool2_kernel<T>(x, Tensor(), [&](auto V, auto index) {
      using I = decltype(index);
      bn_relu_pool2_kernel<T, V, I>
          <<<unsigned(grid_for(o.y.numel(), dev, 16)), kThreads, 0, stream>>>(
              x.data<T>(), o.y.data<T>(), static_cast<const A*>(k.mean.data_ptr()),
              static_cast<const A*>(k.scale.data_ptr()), static_cast<const A*>(k.shift.data_ptr()),
              I(o.y.numel()), pool2_geom<I>(x));
      LOOM_CUDA_CHECK_LAUNCH("bn_relu_pool2_kernel");
    });
  });
  return o;
}

BatchNormGrads CudaBackend::batch_norm_relu_max_pool2_backward(
    const Tensor& grad_out, const Tensor& x0, const Tensor& weight, const Tensor& bias,
    const Tensor& save_mean, const Tensor& save_invstd) {
  check_input("batch_norm_relu_max_pool2_backward", x0);
  Tensor x = raw::contiguous(x0), gout = raw::contiguous(raw::cast(grad_out, x0.dtype()));
  const int64_t N = x.size(0), C = x.size(1), M = N * x.size(2) * x.size(3);
  LOOM_CHECK(gout.shape() == Shape({N, C, x.size(2) / 2, x.size(3) / 2}),
             "batch_norm_relu_max_pool2_backward: gradient ", gout.shape(),
             " does not match the pooled output of input ", x.shape());
  int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  DType ad = acc_dtype(x.dtype());
  Tensor mean = raw::contiguous(raw::cast(save_mean, ad)),
         invstd = raw::contiguous(raw::cast(save_invstd, ad));
  Tensor w = contiguous_if_defined(weight), b = contiguous_if_defined(bias);
  BatchNormGrads out;
  out.grad_input = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  Tensor gw, gb;  // in weight's dtype
  if (w.defined()) {
    gw = empty({C}, {.dtype = w.dtype(), .device = x.device()});
    gb = empty({C}, {.dtype = w.dtype(), .device = x.device()});
  }
  if (C == 0 || M == 0) {
    if (w.defined()) out.grad_weight = gw, out.grad_bias = gb;
    return out;
  }
  NormSums sums;
  sums.S = bn_splits(C, M, dev);  // batch norm's shares per channel, over its M input values
  sums.sdy = empty({C, sums.S}, {.dtype = ad, .device = x.device()});
  sums.sdyx = empty({C, sums.S}, {.dtype = ad, .device = x.device()});
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_relu_max_pool2_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    ReluFromX<T> r{true, channel_vec<T>(w), channel_vec<T>(b),
                   static_cast<const A*>(invstd.data_ptr())};
    const A* mp = static_cast<const A*>(mean.data_ptr());
    with_pool2_kernel<T>(x, out.grad_input, [&](auto V, auto index) {
      using I = decltype(index);
      bn_relu_pool2_backward_partial_kernel<T, V, I>
          <<<dim3(unsigned(sums.S), unsigned(C)), kThreads, 0, stream>>>(
              gout.data<T>(), x.data<T>(), r, pool2_geom<I>(x), I(N), mp,
              static_cast<A*>(sums.sdy.data_ptr()), static_cast<A*>(sums.sdyx.data_ptr()));
      LOOM_CUDA_CHECK_LAUNCH("bn_relu_pool2_backward_partial_kernel");
      const BnBackwardCoefficients k =
          bn_backward_finalize<T>(sums, C, M, w, invstd, gw, gb, stream);
      bn_relu_pool2_backward_apply_kernel<T, V, I>
          <<<unsigned(grid_for(gout.numel(), dev, 16)), kThreads, 0, stream>>>(
              gout.data<T>(), x.data<T>(), r, out.grad_input.data<T>(), mp,
              static_cast<const A*>(k.k.data_ptr()), static_cast<const A*>(k.off.data_ptr()),
              static_cast<const A*>(k.slope.data_ptr()), I(gout.numel()), pool2_geom<I>(x));
      LOOM_CUDA_CHECK_LAUNCH("bn_relu_pool2_backward_apply_kernel");
    });
  });
  if (w.defined()) out.grad_weight = gw, out.grad_bias = gb;
  return out;
}

}  // namespace loom::cuda
