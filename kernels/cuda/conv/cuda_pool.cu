// CUDA max and average pooling over the H, W planes of NCHW tensors, forward and backward, with
// the CPU backend's semantics (kernels/cpu/cpu_pool.cpp): max pooling pads with -inf, returns the
// argmax as an index into each H*W plane (first maximum wins, a NaN wins at once); average
// pooling divides by the window clipped to the padded input (count_include_pad) or the real one.
// One thread per output element forward (MaxPool2d(2) on NCHW: Note [Max pool 2 x 2 forward]).
// Backward: both gather per input element (Note [Pool gather], Note [Max pool gather]); max
// pooling's scatter by the saved indices is kept as its naive version (Note [Max pool scatter]).
// Index arithmetic is 32-bit when the tensors allow it. Max pooling keeps a channels-last input's
// layout (Note [Channels-last pooling]; in 16-byte channel vectors where they fit:
// cuda_pool_cl.cu); average pooling reads any layout as a contiguous copy.
// Leaves out: ceil_mode, dilation, cuDNN's pooling.
#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/conv/cuda_pool_cl.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/functors.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Max pool scatter]
// The naive backward scatters: one thread per output adds its gradient at its argmax with an
// atomic add, into a zero-filled float32 (double for f64) buffer that is then cast to the
// gradient's dtype. With overlapping windows the few adds into one element may come in any order
// (float rounding may then differ between runs in the last bit). It costs a zero-fill pass, the
// atomics and, for the half types, a buffer twice the size plus a cast pass.
//
// Note [Max pool gather]
// The fast backward gathers instead: each thread owns one input element (h, w) and sums the
// gradients of the outputs whose window covers it (the bounds of Note [Pool gather]) and whose
// saved argmax is (h, w). Every input element is written exactly once, in its own dtype: no
// zero-fill, no atomics, no cast pass, and the same sum order on every run.
//
// Note [Pool gather]
// A backward pass that scatters (each output adds into its window) needs atomics where windows
// overlap, and float atomics make the sum order, hence the result, vary from run to run. Instead
// each thread owns one input element and sums the outputs whose window covers it: outputs
// p in [p_lo, p_hi) with p_lo = (h + pad - k) / stride + 1 (0 when h + pad < k) and
// p_hi = min((h + pad) / stride + 1, P). Deterministic, no atomics, no zero-fill pass.
//
// Note [Max pool 2 x 2 forward]
// MaxPool2d(2) on NCHW with an even W (the cnn's fp32 poolings) gets its own forward: one thread
// per output reads its window as two aligned pairs (row 2p and row 2p + 1) and compares the four
// values in the general kernel's order, so values and indices are the same, NaN and ties
// included. The general kernel's window loops, bounds and padding checks cost it about a third
// of memory speed there (ncu, real clocks: 31.7 us for the first pooling's 51 MB read and 39 MB
// written).
//
// Note [Max pool 2 x 2 backward]
// MaxPool2d(2) on NCHW (the cnn workload's fp32 pooling) has windows that do not overlap, so the
// gather needs no search: one thread per output (p, q) reads its gradient and index once and
// writes its four cells, the gradient to the one the index names and zeros to the others; the
// threads of the last window row and column also zero what lies past the last whole window (an
// odd H or W). Every input element is still written exactly once. ncu over the cnn's graph step
// showed the general gather, with its integer divisions per input element and four index reads
// per output, at 6.5% of the step's GPU time, well off memory speed.

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t(1) << 20));
}

#define LOOM_GRID_STRIDE(i, n)                                              \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// PoolGeom in the index type I (int32_t when every index fits, else int64_t).
template <typename I>
struct Geom {
  I planes, H, W, P, Q, kh, kw, sh, sw, ph, pw;
  explicit Geom(const PoolGeom& g)
      : planes(I(g.planes)),
        H(I(g.H)),
        W(I(g.W)),
        P(I(g.P)),
        Q(I(g.Q)),
        kh(I(g.kh)),
        kw(I(g.kw)),
        sh(I(g.sh)),
        sw(I(g.sw)),
        ph(I(g.ph)),
        pw(I(g.pw)) {}
};

bool fits_int32(const PoolGeom& g) {
  constexpr int64_t kMax = int64_t(1) << 30;  // headroom for the grid-stride step
  return g.planes * g.H * g.W < kMax && g.planes * g.P * g.Q < kMax;
}

// Calls f(I{}) with I = int32_t when the geometry's indices fit, else int64_t.
template <typename F>
void with_index_type(const PoolGeom& g, const F& f) {
  if (fits_int32(g))
    f(int32_t{});
  else
    f(int64_t{});
}

// Note [Channels-last pooling]
// With CL the tensors are channels-last (Note [Channels-last]): element (n, c, h, w) of x lies at
// ((n H + h) W + w) C + c instead of ((n C + c) H + h) W + w. Each kernel walks its output in
// memory order either way (so neighbouring threads write neighbouring elements), splits the index
// into the element's coordinates, and reads the other tensor at base + (h W + w) step, where base
// and step (1, or C) come from the layout. The saved argmax stays an index into the H*W plane.

// x: (planes, H, W) -> y, idx: (planes, P, Q); C channels (used when CL).
template <typename T, typename I, bool CL>
__global__ void max_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                  int64_t* __restrict__ idx, Geom<I> g, I C) {
  using A = acc_t<T>;
  const I n = g.planes * g.P * g.Q;
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < n;
       o += I(gridDim.x * blockDim.x)) {
    I p, q, t;
    const T* xp;  // the element (h, w) of o's plane is xp[(h W + w) es]
    I es;
    if constexpr (CL) {
      I c = o % C;
      t = o / C, q = t % g.Q, t /= g.Q, p = t % g.P;
      xp = x + int64_t(t / g.P) * g.H * g.W * C + c, es = C;
    } else {
      q = o % g.Q, t = o / g.Q, p = t % g.P;
      xp = x + int64_t(t / g.P) * g.H * g.W, es = 1;
    }
    I h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;
    I h1 = min(I(h0 + g.kh), g.H), w1 = min(I(w0 + g.kw), g.W);
    h0 = max(h0, I(0)), w0 = max(w0, I(0));
    A best = -INFINITY;
    I arg = h0 * g.W + w0;  // the first real element, if all are -inf
    bool nan = false;
    for (I h = h0; h < h1 && !nan; ++h)
      for (I w = w0; w < w1 && !nan; ++w) {
        A v = A(xp[int64_t(h * g.W + w) * es]);
        nan = v != v;
        if (v > best || nan) {
          best = v;
          arg = h * g.W + w;
        }
      }
    y[o] = T(best);
    idx[o] = int64_t(arg);
  }
}

// gy, idx: (planes, P, Q) -> gx: (planes, H, W) (Note [Max pool gather]); C channels (when CL).
template <typename T, typename I, bool CL>
__global__ void max_pool2d_backward_gather_kernel(const T* __restrict__ gy,
                                                  const int64_t* __restrict__ idx,
                                                  T* __restrict__ gx, Geom<I> g, I C) {
  using A = acc_t<T>;
  const I HW = g.H * g.W, n = g.planes * HW;
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < n;
       i += I(gridDim.x * blockDim.x)) {
    I hw;
    int64_t base, es;  // output (p, q) of i's plane: base + (p Q + q) es
    if constexpr (CL) {
      I c = i % C, t = i / C;
      hw = t % HW;
      base = int64_t(t / HW) * g.P * g.Q * C + c, es = C;
    } else {
      I plane = i / HW;
      hw = i - plane * HW;
      base = int64_t(plane) * g.P * g.Q, es = 1;
    }
    I h = hw / g.W, w = hw - h * g.W;
    I p0 = h + g.ph < g.kh ? 0 : (h + g.ph - g.kh) / g.sh + 1;
    I p1 = min(I((h + g.ph) / g.sh + 1), g.P);
    I q0 = w + g.pw < g.kw ? 0 : (w + g.pw - g.kw) / g.sw + 1;
    I q1 = min(I((w + g.pw) / g.sw + 1), g.Q);
    A s = 0;
    for (I p = p0; p < p1; ++p)
      for (I q = q0; q < q1; ++q) {
        int64_t o = base + int64_t(p * g.Q + q) * es;
        if (idx[o] == int64_t(hw)) s += A(gy[o]);
      }
    gx[i] = T(s);
  }
}

// x: (planes, H, W) -> y, idx: (planes, P, Q) for a 2 x 2 window, stride 2, no padding, NCHW,
// W even and x aligned to a pair (Note [Max pool 2 x 2 forward]); max_pool2d_kernel is its
// general form.
template <typename T, typename I>
__global__ void max_pool2d_2x2_kernel(const T* __restrict__ x, T* __restrict__ y,
                                      int64_t* __restrict__ idx, Geom<I> g) {
  using A = acc_t<T>;
  const I PQ = g.P * g.Q, n = g.planes * PQ;
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < n;
       o += I(gridDim.x * blockDim.x)) {
    const I plane = o / PQ, pq = o - plane * PQ, p = pq / g.Q, q = pq - p * g.Q;
    const T* xp = x + int64_t(plane) * g.H * g.W;
    const I top = 2 * p * g.W + 2 * q;  // the window's cell (0, 0); even, as W is
    const Vec<T, 2> r0 = load_vec<2>(xp, top / 2), r1 = load_vec<2>(xp, (top + g.W) / 2);
    const A v[4] = {A(r0.v[0]), A(r0.v[1]), A(r1.v[0]), A(r1.v[1])};
    const I at[4] = {top, top + 1, top + g.W, top + g.W + 1};
    A best = -INFINITY;
    I arg = top;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const bool nan = v[k] != v[k];
      if (v[k] > best || nan) best = v[k], arg = at[k];
      if (nan) break;
    }
    y[o] = T(best);
    idx[o] = int64_t(arg);
  }
}

// gy, idx: (planes, P, Q) -> gx: (planes, H, W) for a 2 x 2 window, stride 2, no padding, NCHW
// (Note [Max pool 2 x 2 backward]); P, Q >= 1.
template <typename T, typename I>
__global__ void max_pool2d_2x2_backward_kernel(const T* __restrict__ gy,
                                               const int64_t* __restrict__ idx, T* __restrict__ gx,
                                               Geom<I> g) {
  using A = acc_t<T>;
  const T zero = T(A(0));
  const I PQ = g.P * g.Q, n = g.planes * PQ;
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < n;
       o += I(gridDim.x * blockDim.x)) {
    const I plane = o / PQ, pq = o - plane * PQ, p = pq / g.Q, q = pq - p * g.Q;
    const T grad = gy[o];
    const I arg = I(idx[o]);
    T* plane_gx = gx + int64_t(plane) * g.H * g.W;
    const I top = 2 * p * g.W + 2 * q;  // the window's cell (0, 0)
    plane_gx[top] = arg == top ? grad : zero;
    plane_gx[top + 1] = arg == top + 1 ? grad : zero;
    plane_gx[top + g.W] = arg == top + g.W ? grad : zero;
    plane_gx[top + g.W + 1] = arg == top + g.W + 1 ? grad : zero;
    // Cells past the last whole window: columns >= 2Q of rows 2p, 2p+1; rows >= 2P of columns
    // 2q, 2q+1; and the corner past both.
    if (q == g.Q - 1)
      for (I w = 2 * g.Q; w < g.W; ++w) {
        plane_gx[2 * p * g.W + w] = zero;
        plane_gx[(2 * p + 1) * g.W + w] = zero;
      }
    if (p == g.P - 1)
      for (I h = 2 * g.P; h < g.H; ++h) {
        plane_gx[h * g.W + 2 * q] = zero;
        plane_gx[h * g.W + 2 * q + 1] = zero;
        if (q == g.Q - 1)
          for (I w = 2 * g.Q; w < g.W; ++w) plane_gx[h * g.W + w] = zero;
      }
  }
}

// gy, idx: (planes, P, Q) -> gx: (planes, H, W), zeroed first, in the accumulate type: float
// atomics for f32/f16/bf16 (the half types are converted afterwards), double atomics for f64.
// C = 0: NCHW; else channels-last with C channels.
template <typename T>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ gy,
                                           const int64_t* __restrict__ idx,
                                           acc_t<T>* __restrict__ gx, int64_t planes, int64_t PQ,
                                           int64_t HW, int64_t C) {
  LOOM_GRID_STRIDE(o, planes * PQ) {
    if (C == 0)
      atomicAdd(gx + (o / PQ) * HW + idx[o], acc_t<T>(gy[o]));
    else  // o = (n PQ + pq) C + c
      atomicAdd(gx + ((o / C / PQ) * HW + idx[o]) * C + o % C, acc_t<T>(gy[o]));
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

// x: (N, C, H, W) -> (values (N, C, P, Q), int64 indices into each H*W plane), in x's layout
// when it is channels-last (Note [Channels-last pooling]), else contiguous.
std::pair<Tensor, Tensor> CudaBackend::max_pool2d(const Tensor& x0, const Pool2dParams& p) {
  PoolGeom g = pool_geom(x0.shape(), p);
  const bool cl = raw::is_channels_last(x0);
  Tensor x = cl ? x0 : raw::contiguous(x0);
  Shape os{x.size(0), x.size(1), g.P, g.Q};
  auto make = [cl](const Shape& s, Options o) {
    return cl ? raw::empty_channels_last(s, o) : empty(s, o);
  };
  Tensor y = make(os, {.dtype = x.dtype(), .device = x.device()});
  Tensor idx = make(os, {.dtype = DType::I64, .device = x.device()});
  if (y.numel() == 0) return {y, idx};
  int dev = x.device().index;
  DeviceGuard guard(dev);
  // Note [Channels-last pooling in channel vectors] (cuda_pool_cl.cu) when it applies.
  if (cl && max_pool2d_cl_vectors(x, y, idx, g)) return {y, idx};
  LOOM_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    with_index_type(g, [&](auto index) {
      using I = decltype(index);
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(y.numel()), kThreads, 0, current_stream(dev)>>>(
            x.data<scalar_t>(), y.data<scalar_t>(), idx.data<int64_t>(), Geom<I>(g), I(x.size(1)));
        LOOM_CUDA_CHECK_LAUNCH("max_pool2d_kernel");
      };
      const bool pairs =
          g.W % 2 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % (2 * sizeof(scalar_t)) == 0;
      if (!cl && pairs && is_pool_2x2_stride_2(g) && !use_naive_kernels()) {
        max_pool2d_2x2_kernel<scalar_t, I>
            <<<blocks_for(y.numel()), kThreads, 0, current_stream(dev)>>>(
                x.data<scalar_t>(), y.data<scalar_t>(), idx.data<int64_t>(), Geom<I>(g));
        LOOM_CUDA_CHECK_LAUNCH("max_pool2d_2x2_kernel");
      } else if (cl) {
        launch(max_pool2d_kernel<scalar_t, I, true>);
      } else {
        launch(max_pool2d_kernel<scalar_t, I, false>);
      }
    });
  });
  return {y, idx};
}

// grad_y, indices: (N, C, P, Q) -> (N, C, H, W) = x_shape, channels-last when the indices are
// (the forward's input was), else contiguous.
Tensor CudaBackend::max_pool2d_backward(const Tensor& grad_y0, const Tensor& indices0,
                                        const Shape& x_shape, const Pool2dParams& params) {
  const bool cl = raw::is_channels_last(indices0);
  auto layout = [cl](const Tensor& t) { return cl ? raw::channels_last(t) : raw::contiguous(t); };
  Tensor gy = layout(grad_y0), idx = layout(indices0);
  Options opt{.dtype = gy.dtype(), .device = gy.device()};
  Tensor gx = cl ? raw::empty_channels_last(x_shape, opt) : empty(x_shape, opt);
  if (gx.numel() == 0) return gx;
  PoolGeom geom = pool_backward_geom("max_pool2d_backward", gy.shape(), x_shape, params);
  int dev = gy.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  if (cl && max_pool2d_backward_cl_vectors(gy, idx, gx, geom)) return gx;
  if (!use_naive_kernels()) {
    LOOM_DISPATCH_FLOATING(gy.dtype(), "max_pool2d_backward", [&] {
      with_index_type(geom, [&](auto index) {
        using I = decltype(index);
        auto launch = [&](auto kernel) {
          kernel<<<blocks_for(gx.numel()), kThreads, 0, stream>>>(
              gy.data<scalar_t>(), idx.data<int64_t>(), gx.data<scalar_t>(), Geom<I>(geom),
              I(x_shape[1]));
          LOOM_CUDA_CHECK_LAUNCH("max_pool2d_backward_gather_kernel");
        };
        const bool two_by_two = !cl && is_pool_2x2_stride_2(geom) && geom.P > 0 && geom.Q > 0;
        if (two_by_two) {  // Note [Max pool 2 x 2 backward]: one thread per output
          max_pool2d_2x2_backward_kernel<scalar_t, I>
              <<<blocks_for(gy.numel()), kThreads, 0, stream>>>(
                  gy.data<scalar_t>(), idx.data<int64_t>(), gx.data<scalar_t>(), Geom<I>(geom));
          LOOM_CUDA_CHECK_LAUNCH("max_pool2d_2x2_backward_kernel");
        } else if (cl) {
          launch(max_pool2d_backward_gather_kernel<scalar_t, I, true>);
        } else {
          launch(max_pool2d_backward_gather_kernel<scalar_t, I, false>);
        }
      });
    });
    return gx;
  }
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
          planes, PQ, HW, cl ? x_shape[1] : 0);
      LOOM_CUDA_CHECK_LAUNCH("max_pool2d_backward_kernel");
    });
  }
  if (half) {  // acc holds gx's elements in gx's memory order: an elementwise cast
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
