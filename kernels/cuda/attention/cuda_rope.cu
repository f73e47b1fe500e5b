// CUDA rotary position embedding (Backend::rope, the fused section of kernels/backend_methods.inc;
// Note [Rotary embedding] in autograd/ops/rope.cpp): one thread per V pairs (k, k + D/2) of a
// (b, h, t) row of x (B, H, T, D), V = 4 when the head dim is contiguous and aligned (16-byte
// float32 reads of the cos and sin tables), else 1; the rotation in float32 (float64 for float64
// x), rounded once. A naive kernel (one thread per output element, every stride) stays beside it as
// the reference (use_naive_kernels). A position outside the table is reported through the device
// error slot (Note [Errors found on the device] in core/cuda/device_error.h) and its row written
// as zeros.
// Leaves out: building the tables (autograd/ops/rope.cpp), fusing the rotation into the attention.
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/device_error.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loops.cuh"

namespace loom::cuda {

namespace {

// The geometry of one launch: x and y strides in elements, B H T rows of `half` pairs.
struct RopeGeom {
  int64_t H, T, half, P;
  int64_t xs[4], ys[4];
  const int64_t* positions;  // (B, T), or null: offset + t
  int64_t offset;
  int sign;  // +1, or -1 for the inverse rotation (the backward)
  DeviceErrorSlot* err;
};

// The position of row r (over B H T) and its element offsets in x and y at head dim 0; false
// (reported once) when the position is outside the table.
__device__ __forceinline__ bool row_of(const RopeGeom& g, int64_t r, int64_t& pos, int64_t& xo,
                                       int64_t& yo) {
  const int64_t t = r % g.T, bh = r / g.T, h = bh % g.H, b = bh / g.H;
  xo = b * g.xs[0] + h * g.xs[1] + t * g.xs[2];
  yo = b * g.ys[0] + h * g.ys[1] + t * g.ys[2];
  pos = g.positions ? g.positions[b * g.T + t] : g.offset + t;
  if (pos >= 0 && pos < g.P) return true;
  report_device_error(g.err, DeviceOp::Rope, pos, b * g.T + t, g.P);
  return false;
}

// V pairs per thread: pairs k .. k + V - 1 of a row. S: the arithmetic (and tables') type.
template <typename T, typename S, int V>
__global__ void __launch_bounds__(kBlockSize)
    rope_kernel(const T* __restrict__ x, T* __restrict__ y, const S* __restrict__ cos,
                const S* __restrict__ sin, RopeGeom g, int64_t rows) {
  const int64_t per_row = g.half / V, n = rows * per_row;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t k = (i % per_row) * V;
    int64_t pos, xo, yo;
    const bool ok = row_of(g, i / per_row, pos, xo, yo);
    S c[V], s[V], a[V], b[V];
    if (V == 4 && ok) {  // 16-byte (float32) reads of the tables
      const auto cv = *reinterpret_cast<const Vec<S, V>*>(cos + pos * g.half + k);
      const auto sv = *reinterpret_cast<const Vec<S, V>*>(sin + pos * g.half + k);
#pragma unroll
      for (int e = 0; e < V; ++e) c[e] = cv.v[e], s[e] = sv.v[e];
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        c[e] = ok ? cos[pos * g.half + k + e] : S(0);
        s[e] = ok ? sin[pos * g.half + k + e] : S(0);
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      a[e] = S(acc_t<T>(x[xo + (k + e) * g.xs[3]]));
      b[e] = S(acc_t<T>(x[xo + (k + g.half + e) * g.xs[3]]));
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const S sn = S(g.sign) * s[e];
      y[yo + (k + e) * g.ys[3]] = T(acc_t<T>(a[e] * c[e] - b[e] * sn));
      y[yo + (k + g.half + e) * g.ys[3]] = T(acc_t<T>(b[e] * c[e] + a[e] * sn));
    }
  }
}

// The reference: one thread per output element (b, h, t, j) of the full head dim.
template <typename T, typename S>
__global__ void rope_naive_kernel(const T* __restrict__ x, T* __restrict__ y,
                                  const S* __restrict__ cos, const S* __restrict__ sin, RopeGeom g,
                                  int64_t rows) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, D = 2 * g.half;
  if (i >= rows * D) return;
  const int64_t j = i % D, k = j % g.half;
  int64_t pos, xo, yo;
  const bool ok = row_of(g, i / D, pos, xo, yo);
  const S c = ok ? cos[pos * g.half + k] : S(0), s = ok ? S(g.sign) * sin[pos * g.half + k] : S(0);
  const S mine = S(acc_t<T>(x[xo + j * g.xs[3]]));
  const S other = S(acc_t<T>(x[xo + (j < g.half ? j + g.half : j - g.half) * g.xs[3]]));
  y[yo + j * g.ys[3]] = T(acc_t<T>(j < g.half ? mine * c - other * s : mine * c + other * s));
}

RopeGeom geom_of(const Tensor& x, const Tensor& y, const Tensor& cos, const Tensor& positions,
                 int64_t offset, bool inverse) {
  RopeGeom g{x.size(1),
             x.size(2),
             x.size(3) / 2,
             cos.size(0),
             {x.stride(0), x.stride(1), x.stride(2), x.stride(3)},
             {y.stride(0), y.stride(1), y.stride(2), y.stride(3)},
             data_or_null<int64_t>(positions),
             offset,
             inverse ? -1 : 1,
             device_error_slot(x.device().index)};
  return g;
}

// Whether 4 pairs per thread work: head dims contiguous, half % 4 == 0, and every row start of x
// and y aligned to 4 elements (16-byte table reads follow from half % 4 == 0).
bool four_pairs(const Tensor& x, const Tensor& y) {
  const int64_t half = x.size(3) / 2;
  if (half % 4 != 0 || x.stride(3) != 1 || y.stride(3) != 1) return false;
  for (const Tensor* t : {&x, &y}) {
    if (!aligned_to(t->data_ptr(), 4 * t->element_size())) return false;
    for (int d = 0; d < 3; ++d)
      if (t->size(d) > 1 && t->stride(d) % 4 != 0) return false;
  }
  return true;
}

}  // namespace

// x: (B, H, T, D) any strides; cos, sin: (P, D / 2); positions: (B, T) or undefined -> y like x
Tensor CudaBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin,
                         const Tensor& positions, int64_t offset, bool inverse) {
  check_rope_args(x, cos, sin, positions, offset);
  Tensor y = empty_rope_output(x);
  const int64_t rows = x.size(0) * x.size(1) * x.size(2);
  if (y.numel() == 0) return y;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const RopeGeom g = geom_of(x, y, cos, positions, offset, inverse);
  LOOM_DISPATCH_FLOATING(x.dtype(), "rope", [&] {
    using T = scalar_t;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    if (use_naive_kernels()) {
      const int64_t n = rows * x.size(3);
      rope_naive_kernel<T, S>
          <<<unsigned((n + kBlockSize - 1) / kBlockSize), kBlockSize, 0, stream>>>(
              px, py, cos.data<S>(), sin.data<S>(), g, rows);
    } else if (std::is_same_v<S, float> && four_pairs(x, y)) {
      rope_kernel<T, S, 4><<<grid_for(rows * g.half / 4, dev), kBlockSize, 0, stream>>>(
          px, py, cos.data<S>(), sin.data<S>(), g, rows);
    } else {
      rope_kernel<T, S, 1><<<grid_for(rows * g.half, dev), kBlockSize, 0, stream>>>(
          px, py, cos.data<S>(), sin.data<S>(), g, rows);
    }
  });
  LOOM_CUDA_CHECK_LAUNCH("rope kernels");
  return y;
}

}  // namespace loom::cuda
