// Host-side geometry that the CPU and CUDA backends share, so the two can never disagree on it:
// a tensor seen as (outer, n, inner) around one dim, the permutation that moves a dim last (and
// running a row kernel along any dim with it), and the window geometry of 2-d pooling.
// Leaves out: reductions' layout (kernels/reduce_layout.h) and the kernels themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/tensor_views.h"
#include "kernels/params.h"
#include "kernels/raw_ops.h"

namespace loom {

// A shape seen as (outer, n, inner) around `dim`.
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

inline DimSplit split_at(const Shape& s, int64_t dim) {
  DimSplit d;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < dim)
      d.outer *= s[size_t(i)];
    else if (i == dim)
      d.n = s[size_t(i)];
    else
      d.inner *= s[size_t(i)];
  }
  return d;
}

// The permutation that moves `dim` last, and its inverse.
inline std::vector<int64_t> dim_last_perm(int64_t ndim, int64_t dim) {
  std::vector<int64_t> p;
  for (int64_t d = 0; d < ndim; ++d)
    if (d != dim) p.push_back(d);
  p.push_back(dim);
  return p;
}

inline std::vector<int64_t> inverse_perm(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
  return inv;
}

// Runs rows_fn(contiguous inputs, out, rows, n) with `dim` moved last (rows of n contiguous
// elements; nothing when there are no rows); returns the result in the inputs' shape
// (contiguous). All inputs share one shape and dtype.
template <typename RowsFn>
Tensor along_dim(const std::vector<Tensor>& in, int64_t dim, const RowsFn& rows_fn) {
  const Tensor& x0 = in[0];
  const int64_t nd = x0.dim();
  const bool last = nd == 0 || dim == nd - 1;
  std::vector<int64_t> perm;
  if (!last) perm = dim_last_perm(nd, dim);
  std::vector<Tensor> c;
  for (const Tensor& t : in) c.push_back(raw::contiguous(last ? t : raw::permute(t, perm)));
  Tensor out = empty(c[0].shape(), {.dtype = x0.dtype(), .device = x0.device()});
  const int64_t n = nd == 0 ? 1 : x0.size(dim);
  const int64_t rows = n == 0 ? 0 : x0.numel() / n;
  if (rows > 0) rows_fn(c, out, rows, n);
  if (last) return out;
  return raw::contiguous(raw::permute(out, inverse_perm(perm)));
}

// The windows of a 2-d pooling of x: (N, C, H, W) -> (N, C, P, Q), seen as planes = N * C.
struct PoolGeom {
  int64_t planes, H, W, P, Q, kh, kw, sh, sw, ph, pw;
};

inline PoolGeom pool_geom(const Shape& x, const Pool2dParams& p) {
  PoolGeom g{};
  g.planes = x[0] * x[1], g.H = x[2], g.W = x[3];
  g.kh = p.kernel[0], g.kw = p.kernel[1], g.sh = p.stride[0], g.sw = p.stride[1];
  g.ph = p.padding[0], g.pw = p.padding[1];
  g.P = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
  g.Q = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

// MaxPool2d(2)'s geometry (window 2 x 2, stride 2, no padding): non-overlapping windows, which
// the CPU and CUDA backends pool with kernels of their own.
inline bool is_pool_2x2_stride_2(const PoolGeom& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0;
}

// The pooling geometry of input x under p, for a backward pass: grad_y must have the output's
// shape (N, C, P, Q), else the error names both shapes and the window.
inline PoolGeom pool_backward_geom(const char* op, const Shape& grad_y, const Shape& x,
                                   const Pool2dParams& p) {
  PoolGeom g = pool_geom(x, p);
  LOOM_CHECK(grad_y.size() == 4 && grad_y[2] == g.P && grad_y[3] == g.Q, op, ": grad_y ", grad_y,
             " does not match the output of input ", x, " with kernel [", p.kernel[0], ", ",
             p.kernel[1], "], stride [", p.stride[0], ", ", p.stride[1], "] (expected [", x[0],
             ", ", x[1], ", ", g.P, ", ", g.Q, "])");
  return g;
}

}  // namespace loom
