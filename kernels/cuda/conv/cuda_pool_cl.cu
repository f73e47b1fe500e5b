// Max pooling over channels-last tensors, a 16-byte vector of channels per thread, forward and
// backward (the gather of Note [Max pool gather]): ResNet's stem pooling (3 x 3, stride 2,
// padding 1, 64 channels) under autocast. The values, indices and gradients are those of the
// general kernels of cuda_pool.cu, bit for bit: the same window order, the same first-maximum and
// NaN rules, the same summation order.
// Leaves out: channel counts that are not a multiple of a vector and misaligned tensors (the
// general kernels take those), and NCHW tensors.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/conv/cuda_pool_cl.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Channels-last pooling in channel vectors]
// The general channels-last kernels (Note [Channels-last pooling]) give each thread one element:
// every element splits its flat index into (n, h, w, c) and computes its window's bounds, about a
// dozen 32-bit divisions by values known only at run time. For ResNet-50's stem pooling (64 x 64
// channels x 112 x 112 in, bf16) that arithmetic, not memory, bounded them: Nsight Compute timed
// the backward at 0.79 ms and the forward at 0.19 ms on an H200 (these kernels: 0.185 and 0.112
// ms; the int64 indices are most of the bytes either way). Here a thread owns V channels of one
// pixel (V = 16 bytes / element size: 8 for bf16), so the divisions are paid once per V elements; a
// block is (TC channel vectors) x (R pixels), threadIdx.x along the channels, so a warp reads and
// writes whole 16-byte vectors of neighbouring channels. Each of the V lanes keeps its own maximum,
// argmax and NaN flag (a lane stops at its first NaN, as the general kernel stops its window loop),
// and the backward sums, per lane, the gradients of the windows that cover its pixel in the general
// kernel's order. The int64 argmax indices are read and written as pairs (16 bytes).

constexpr int kThreads = 256;

struct VecLaunch {
  dim3 grid, block;
};

// Blocks of (TC channel vectors) x (R pixels) over `pixels` pixels of Cv vectors; false when the
// grid would not fit.
bool vec_launch(int64_t pixels, int64_t Cv, VecLaunch& l) {
  const int64_t TC = std::min<int64_t>(Cv, kThreads), R = kThreads / TC;
  const int64_t gx = (pixels + R - 1) / R, gy = (Cv + TC - 1) / TC;
  if (gx > INT32_MAX || gy > 65535) return false;
  l = {dim3(unsigned(gx), unsigned(gy)), dim3(unsigned(TC), unsigned(R))};
  return true;
}

// x: (N, H, W, C) as Cv vectors -> y (N, P, Q, C), idx (N, P, Q, C) int64 into each H*W plane.
template <typename T, int V>
__global__ void max_pool2d_cl_vec_kernel(const T* __restrict__ x, T* __restrict__ y,
                                         int64_t* __restrict__ idx, PoolGeom g, int64_t Cv,
                                         int64_t pixels) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const int64_t cv = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t o = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;  // output pixel (n, p, q)
  if (cv >= Cv || o >= pixels) return;
  const int64_t q = o % g.Q, t = o / g.Q, p = t % g.P, n = t / g.P;
  const int64_t h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;
  const int64_t h1 = min(h0 + g.kh, g.H), w1 = min(w0 + g.kw, g.W);
  const int64_t hs = max(h0, int64_t(0)), ws = max(w0, int64_t(0));
  const VT* xv = reinterpret_cast<const VT*>(x) + n * g.H * g.W * Cv + cv;
  A best[V];
  int64_t arg[V];
  bool nan[V];
#pragma unroll
  for (int j = 0; j < V; ++j) best[j] = -INFINITY, arg[j] = hs * g.W + ws, nan[j] = false;
  for (int64_t h = hs; h < h1; ++h)
    for (int64_t w = ws; w < w1; ++w) {
      const VT v = xv[(h * g.W + w) * Cv];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A a = A(v.v[j]);
        if (!nan[j] && (a > best[j] || a != a)) best[j] = a, arg[j] = h * g.W + w, nan[j] = a != a;
      }
    }
  VT out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = T(best[j]);
  reinterpret_cast<VT*>(y)[o * Cv + cv] = out;
  longlong2* ip = reinterpret_cast<longlong2*>(idx + (o * Cv + cv) * V);
#pragma unroll
  for (int j = 0; j < V; j += 2) ip[j / 2] = make_longlong2(arg[j], arg[j + 1]);
}

// gy, idx: (N, P, Q, C) -> gx (N, H, W, C), Cv vectors per pixel (Note [Max pool gather]).
template <typename T, int V>
__global__ void max_pool2d_backward_cl_vec_kernel(const T* __restrict__ gy,
                                                  const int64_t* __restrict__ idx,
                                                  T* __restrict__ gx, PoolGeom g, int64_t Cv,
                                                  int64_t pixels) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const int64_t cv = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t i = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;  // input pixel (n, h, w)
  if (cv >= Cv || i >= pixels) return;
  const int64_t w = i % g.W, t = i / g.W, h = t % g.H, n = t / g.H, hw = h * g.W + w;
  const int64_t p0 = h + g.ph < g.kh ? 0 : (h + g.ph - g.kh) / g.sh + 1;
  const int64_t p1 = min((h + g.ph) / g.sh + 1, g.P);
  const int64_t q0 = w + g.pw < g.kw ? 0 : (w + g.pw - g.kw) / g.sw + 1;
  const int64_t q1 = min((w + g.pw) / g.sw + 1, g.Q);
  A s[V];
#pragma unroll
  for (int j = 0; j < V; ++j) s[j] = 0;
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t o = ((n * g.P + p) * g.Q + q) * Cv + cv;
      const VT v = reinterpret_cast<const VT*>(gy)[o];
      const longlong2* ip = reinterpret_cast<const longlong2*>(idx + o * V);
#pragma unroll
      for (int j = 0; j < V; j += 2) {
        const longlong2 pair = ip[j / 2];
        if (pair.x == hw) s[j] += A(v.v[j]);
        if (pair.y == hw) s[j + 1] += A(v.v[j + 1]);
      }
    }
  VT out;
#pragma unroll
  for (int j = 0; j < V; ++j) out.v[j] = T(s[j]);
  reinterpret_cast<VT*>(gx)[i * Cv + cv] = out;
}

// Calls launch(T{}, V, l, stream) for t's dtype T, V = 16 bytes / sizeof(T), when every tensor of
// ts is channels-last and 16-byte aligned, C is a multiple of V and the grid l over `pixels`
// pixels of C / V vectors fits; whether it did (else the general kernels take the op).
template <typename Launch>
bool launch_vectors(const char* op, const Tensor& t, int64_t C, int64_t pixels,
                    std::initializer_list<const Tensor*> ts, const Launch& launch) {
  if (use_naive_kernels()) return false;
  for (const Tensor* u : ts)
    if (!raw::is_channels_last(*u) || !aligned_to(u->data_ptr(), 16)) return false;
  bool ran = false;
  LOOM_DISPATCH_FLOATING(t.dtype(), op, [&] {
    using T = scalar_t;
    constexpr int V = int(16 / sizeof(T));
    VecLaunch l;
    if (C % V != 0 || !vec_launch(pixels, C / V, l)) return;
    launch(T{}, std::integral_constant<int, V>{}, l, current_stream(t.device().index));
    ran = true;
  });
  return ran;
}

}  // namespace

bool max_pool2d_cl_vectors(const Tensor& x, const Tensor& y, const Tensor& idx, const PoolGeom& g) {
  const int64_t C = x.size(1), pixels = x.size(0) * g.P * g.Q;
  return launch_vectors("max_pool2d", x, C, pixels, {&x, &y, &idx},
                        [&](auto t, auto V, const VecLaunch& l, cudaStream_t stream) {
                          using T = decltype(t);
                          max_pool2d_cl_vec_kernel<T, V><<<l.grid, l.block, 0, stream>>>(
                              x.data<T>(), y.data<T>(), idx.data<int64_t>(), g, C / V, pixels);
                          LOOM_CUDA_CHECK_LAUNCH("max_pool2d_cl_vec_kernel");
                        });
}

bool max_pool2d_backward_cl_vectors(const Tensor& gy, const Tensor& idx, const Tensor& gx,
                                    const PoolGeom& g) {
  const int64_t C = gx.size(1), pixels = gx.size(0) * g.H * g.W;
  return launch_vectors("max_pool2d_backward", gy, C, pixels, {&gy, &idx, &gx},
                        [&](auto t, auto V, const VecLaunch& l, cudaStream_t stream) {
                          using T = decltype(t);
                          max_pool2d_backward_cl_vec_kernel<T, V><<<l.grid, l.block, 0, stream>>>(
                              gy.data<T>(), idx.data<int64_t>(), gx.data<T>(), g, C / V, pixels);
                          LOOM_CUDA_CHECK_LAUNCH("max_pool2d_backward_cl_vec_kernel");
                        });
}

}  // namespace loom::cuda
