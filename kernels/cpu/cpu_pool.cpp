// CPU max and average pooling over the H, W planes of NCHW tensors, forward and backward, with
// PyTorch's semantics: max pooling pads with -inf and returns the argmax as an index into each
// H*W plane (the first maximum wins; a NaN wins over any number); average pooling divides by the
// window clipped to the padded input (count_include_pad) or to the real input. Parallel over
// planes. Leaves out: ceil_mode, dilation in pooling, 3-d (unbatched) inputs (the op layer adds the
// batch).
#include <cmath>
#include <limits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

// Runs f(plane) over all planes in parallel, in chunks of about kGrainSize elements of work.
template <typename F>
void for_each_plane(const PoolGeom& g, int64_t work_per_plane, const F& f) {
  int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work_per_plane, 1));
  parallel_for(0, g.planes, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// Note [Max pooling a row at a time]
// Comparing window cells one output at a time branches on "is this a new maximum?", which random
// data makes unpredictable. Instead, one output row (p) is computed at once: for each window
// cell (r, s), every output q compares x[h0 + r, q*sw - pw + s] with its running best. That
// inner loop over q (max_update_row) has independent lanes and a select instead of a branch,
// so it vectorizes. Cells are still visited in (r, s) order for every output, and `>` is strict, so
// the first maximum wins; a NaN always takes over (as PyTorch), so a window holding a NaN yields
// NaN.

// One window cell for the outputs q in [q0, q1) of a row: best[q], arg[q] take x[base + q*sw]
// when it is larger or NaN. Quiet comparisons (no FP exception on NaN) and restrict pointers
// let the compiler vectorize it as a select; `|` of the two tests as ints (not `||`, not `|` of
// bools, which clang warns about) evaluates both, with no branch.
template <typename T, typename A>
void max_update_row(const T* __restrict x, int64_t base, int64_t sw, A* __restrict best,
                    int64_t* __restrict arg, int64_t q0, int64_t q1) {
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t i = base + q * sw;
    const A v = A(x[i]), b = best[q];
    const bool take = int(std::isgreater(v, b)) | int(std::isnan(v));
    best[q] = take ? v : b;
    arg[q] = take ? i : arg[q];
  }
}

// x: (N, C, H, W) contiguous -> y, idx: (N, C, P, Q)
template <typename T>
void max_pool_kernel(const T* x, T* y, int64_t* idx, const PoolGeom& g) {
  using A = acc_t<T>;
  int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.P * g.Q * g.kh * g.kw, 1));
  parallel_for(0, g.planes, grain, [&](int64_t b, int64_t e) {
    std::vector<A> best(size_t(g.Q));
    std::vector<int64_t> arg(size_t(g.Q));
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = x + plane * g.H * g.W;
      for (int64_t p = 0; p < g.P; ++p) {
        const int64_t h0 = std::max<int64_t>(p * g.sh - g.ph, 0),
                      h1 = std::min(p * g.sh - g.ph + g.kh, g.H);
        for (int64_t q = 0; q < g.Q; ++q) {
          best[q] = -std::numeric_limits<A>::infinity();
          arg[q] =
              h0 * g.W + std::max<int64_t>(q * g.sw - g.pw, 0);  // first real cell, if all are -inf
        }
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t s = 0; s < g.kw; ++s) {
            // Outputs q whose column q*sw - pw + s lies inside [0, W).
            const int64_t lo = g.pw - s, hi = g.W - 1 + g.pw - s;
            const int64_t q0 = lo <= 0 ? 0 : (lo + g.sw - 1) / g.sw;
            const int64_t q1 = hi < 0 ? 0 : std::min(g.Q, hi / g.sw + 1);
            const int64_t base = h * g.W + s - g.pw;
            max_update_row(xp, base, g.sw, best.data(), arg.data(), q0, q1);
          }
        T* yp = y + (plane * g.P + p) * g.Q;
        int64_t* ip = idx + (plane * g.P + p) * g.Q;
        for (int64_t q = 0; q < g.Q; ++q) {
          yp[q] = T(best[q]);
          ip[q] = arg[q];
        }
      }
    }
  });
}

// Note [Max pooling 2 x 2]
// MaxPool2d(2) (window 2 x 2, stride 2, no padding) is the pooling of nearly every CNN, the cnn
// workload's included. Its output rows are short (Q = 14 and 7 there): max_pool_kernel's row
// vectors hardly fill, and it pays an integer division per window column per row. perf showed
// it at 5.6% of the CPU cnn step, several times its memory traffic. Here each output compares
// its four cells in straight-line code, in the same (r, s) order and with the same rule as
// max_update_row (strict >, so the first maximum wins; a NaN takes over), so both give the same
// values and indices; max_pool_kernel stays the general version and the reference. The cnn's two
// poolings, forward, on the 2-core development machine: 27 + 14 ms with the general kernel, 7 + 6
// ms with this one (the 14 x 14 layer's rows of Q = 7 do not fill an 8-lane vector).

// x: (N, C, H, W) contiguous -> y, idx: (N, C, P, Q), P = H / 2, Q = W / 2 (floor)
// The loop over q is one `omp simd` loop of selects: each lane keeps its best value and which of
// the four cells it came from (k = 2 r + s), and the index is built from k at the end. Written as
// a lambda per cell, GCC turned the selects into branches, which random data mispredicts.
template <typename T>
void max_pool_2x2_kernel(const T* x, T* y, int64_t* idx, const PoolGeom& g) {
  using A = acc_t<T>;
  for_each_plane(g, 4 * g.P * g.Q, [&](int64_t plane) {
    const T* xp = x + plane * g.H * g.W;
    for (int64_t p = 0; p < g.P; ++p) {
      const int64_t top = 2 * p * g.W;  // index of the window row r = 0 in the plane
      const T* __restrict r0 = xp + top;
      const T* __restrict r1 = r0 + g.W;
      T* __restrict yp = y + (plane * g.P + p) * g.Q;
      int64_t* __restrict ip = idx + (plane * g.P + p) * g.Q;
      const int64_t W = g.W;
#pragma omp simd
      for (int64_t q = 0; q < g.Q; ++q) {
        A best = A(r0[2 * q]);
        int64_t k = 0;
        const A b = A(r0[2 * q + 1]), c = A(r1[2 * q]), d = A(r1[2 * q + 1]);
        bool take = int(std::isgreater(b, best)) | int(std::isnan(b));
        best = take ? b : best;
        k = take ? 1 : k;
        take = int(std::isgreater(c, best)) | int(std::isnan(c));
        best = take ? c : best;
        k = take ? 2 : k;
        take = int(std::isgreater(d, best)) | int(std::isnan(d));
        best = take ? d : best;
        k = take ? 3 : k;
        yp[q] = T(best);
        ip[q] = top + 2 * q + (k & 1) + (k >> 1) * W;
      }
    }
  });
}

// gy, idx: (N, C, P, Q) -> gx: (N, C, H, W), scatter-add by the saved indices.
template <typename T>
void max_pool_backward_kernel(const T* gy, const int64_t* idx, T* gx, const PoolGeom& g) {
  using A = acc_t<T>;
  for_each_plane(g, g.H * g.W, [&](int64_t plane) {
    T* gxp = gx + plane * g.H * g.W;
    const T* gyp = gy + plane * g.P * g.Q;
    const int64_t* ip = idx + plane * g.P * g.Q;
    for (int64_t i = 0; i < g.H * g.W; ++i) gxp[i] = T(0);
    for (int64_t i = 0; i < g.P * g.Q; ++i) gxp[ip[i]] = T(A(gxp[ip[i]]) + A(gyp[i]));
  });
}

// The backward of MaxPool2d(2) (Note [Max pooling 2 x 2]): its windows do not overlap, so each
// input cell is in at most one window and gets that output's gradient if the saved index names
// it, else 0. One pass writes every cell of gx once, where the general kernel clears gx and then
// scatters into it. idx must come from the forward (each index inside its own window).
template <typename T>
void max_pool_2x2_backward_kernel(const T* gy, const int64_t* idx, T* gx, const PoolGeom& g) {
  for_each_plane(g, g.H * g.W, [&](int64_t plane) {
    T* gxp = gx + plane * g.H * g.W;
    const T* gyp = gy + plane * g.P * g.Q;
    const int64_t* ip = idx + plane * g.P * g.Q;
    for (int64_t h = 0; h < g.H; ++h) {
      T* row = gxp + h * g.W;
      int64_t w = 0;
      if (h / 2 < g.P) {  // a last odd row (and column) belongs to no window
        const T* gr = gyp + (h / 2) * g.Q;
        const int64_t* ir = ip + (h / 2) * g.Q;
        for (int64_t q = 0; q < g.Q; ++q) {
          const int64_t cell = h * g.W + 2 * q;
          row[2 * q] = ir[q] == cell ? gr[q] : T(0);
          row[2 * q + 1] = ir[q] == cell + 1 ? gr[q] : T(0);
        }
        w = 2 * g.Q;
      }
      for (; w < g.W; ++w) row[w] = T(0);
    }
  });
}

// The window of output (p, q): rows [h0, h1), cols [w0, w1) of the real input, and the divisor.
struct Window {
  int64_t h0, h1, w0, w1;
  double count;
};

inline Window avg_window(const PoolGeom& g, int64_t p, int64_t q, bool include_pad) {
  int64_t h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;
  // The window clipped to the padded input (it can only overhang on the far side).
  int64_t h1 = std::min(h0 + g.kh, g.H + g.ph), w1 = std::min(w0 + g.kw, g.W + g.pw);
  double padded = double((h1 - h0) * (w1 - w0));
  h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H), w1 = std::min(w1, g.W);
  double real = double((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, include_pad ? padded : real};
}

// x: (N, C, H, W) contiguous -> y: (N, C, P, Q)
template <typename T>
void avg_pool_kernel(const T* x, T* y, const PoolGeom& g, bool include_pad) {
  using A = acc_t<T>;
  for_each_plane(g, g.P * g.Q * g.kh * g.kw, [&](int64_t plane) {
    const T* xp = x + plane * g.H * g.W;
    T* yp = y + plane * g.P * g.Q;
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        Window win = avg_window(g, p, q, include_pad);
        A s = 0;
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) s += A(xp[h * g.W + w]);
        yp[p * g.Q + q] = T(s / A(win.count));
      }
  });
}

// gy: (N, C, P, Q) -> gx: (N, C, H, W); each output spreads gy / divisor over its window.
template <typename T>
void avg_pool_backward_kernel(const T* gy, T* gx, const PoolGeom& g, bool include_pad) {
  using A = acc_t<T>;
  for_each_plane(g, g.P * g.Q * g.kh * g.kw, [&](int64_t plane) {
    T* gxp = gx + plane * g.H * g.W;
    const T* gyp = gy + plane * g.P * g.Q;
    std::vector<A> acc(size_t(g.H * g.W), A(0));
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        Window win = avg_window(g, p, q, include_pad);
        A v = A(gyp[p * g.Q + q]) / A(win.count);
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) acc[h * g.W + w] += v;
      }
    for (int64_t i = 0; i < g.H * g.W; ++i) gxp[i] = T(acc[i]);
  });
}

}  // namespace

std::pair<Tensor, Tensor> CpuBackend::max_pool2d(const Tensor& x0, const Pool2dParams& p) {
  PoolGeom g = pool_geom(x0.shape(), p);
  Tensor x = raw::contiguous(x0);
  Shape os{x.size(0), x.size(1), g.P, g.Q};
  Tensor y = empty(os, {.dtype = x.dtype()}), idx = empty(os, {.dtype = DType::I64});
  if (y.numel() == 0) return {y, idx};
  const bool two_by_two = is_pool_2x2_stride_2(g);
  LOOM_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&] {
    if (two_by_two)  // Note [Max pooling 2 x 2]
      max_pool_2x2_kernel(x.data<scalar_t>(), y.data<scalar_t>(), idx.data<int64_t>(), g);
    else
      max_pool_kernel(x.data<scalar_t>(), y.data<scalar_t>(), idx.data<int64_t>(), g);
  });
  return {y, idx};
}

Tensor CpuBackend::max_pool2d_backward(const Tensor& grad_y, const Tensor& indices,
                                       const Shape& x_shape, const Pool2dParams& p) {
  Tensor gy = raw::contiguous(grad_y), idx = raw::contiguous(indices);
  PoolGeom g = pool_backward_geom("max_pool2d_backward", gy.shape(), x_shape, p);
  Tensor gx = empty(x_shape, {.dtype = gy.dtype()});
  if (gx.numel() == 0) return gx;
  const bool two_by_two = is_pool_2x2_stride_2(g);
  LOOM_DISPATCH_FLOATING(gy.dtype(), "max_pool2d_backward", [&] {
    if (two_by_two)  // Note [Max pooling 2 x 2]
      max_pool_2x2_backward_kernel(gy.data<scalar_t>(), idx.data<int64_t>(), gx.data<scalar_t>(),
                                   g);
    else
      max_pool_backward_kernel(gy.data<scalar_t>(), idx.data<int64_t>(), gx.data<scalar_t>(), g);
  });
  return gx;
}

Tensor CpuBackend::avg_pool2d(const Tensor& x0, const Pool2dParams& p) {
  PoolGeom g = pool_geom(x0.shape(), p);
  Tensor x = raw::contiguous(x0);
  Tensor y = empty({x.size(0), x.size(1), g.P, g.Q}, {.dtype = x.dtype()});
  if (y.numel() == 0) return y;
  LOOM_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&] {
    avg_pool_kernel(x.data<scalar_t>(), y.data<scalar_t>(), g, p.count_include_pad);
  });
  return y;
}

Tensor CpuBackend::avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape,
                                       const Pool2dParams& p) {
  PoolGeom g = pool_geom(x_shape, p);
  Tensor gy = raw::contiguous(grad_y);
  Tensor gx = empty(x_shape, {.dtype = gy.dtype()});
  if (gx.numel() == 0) return gx;
  LOOM_DISPATCH_FLOATING(gy.dtype(), "avg_pool2d_backward", [&] {
    avg_pool_backward_kernel(gy.data<scalar_t>(), gx.data<scalar_t>(), g, p.count_include_pad);
  });
  return gx;
}

}  // namespace loom::cpu
