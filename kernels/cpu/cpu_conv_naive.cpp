// The direct convolution (see kernels/cpu/cpu_conv.h): inputs converted to float64, seven loops,
// the result converted back to the input's dtype. One loop nest per direction, written to be
// obviously right.
// Leaves out: threads, blocking, any layout but contiguous NCHW (inputs are made so first).
#include "kernels/cpu/cpu_conv.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

using Geom = ConvGeom;

// Note [Naive conv geometry]
// The oracle computes its own sizes rather than calling conv_geom / conv_out_size, which the fast
// kernels use: a mistake there would otherwise shape both paths alike and pass every comparison.
// Here the output extent is found by counting window positions instead of by the closed formula:
// position p is valid while its last tap, p * stride + dil * (k - 1), stays inside the padded
// extent in + 2 pad.
int64_t count_positions(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  int64_t n = 0;
  while (n * stride + dil * (k - 1) < in + 2 * pad) ++n;
  return n;
}

Geom naive_geom(const Shape& x, const Shape& w, const Conv2dParams& p) {
  Geom g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.K = w[0], g.Cg = w[1], g.R = w[2], g.S = w[3];
  g.G = p.groups, g.Kg = g.K / p.groups;
  g.sh = p.stride[0], g.sw = p.stride[1], g.ph = p.padding[0], g.pw = p.padding[1];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.P = count_positions(g.H, g.R, g.sh, g.ph, g.dh);
  g.Q = count_positions(g.W, g.S, g.sw, g.pw, g.dw);
  return g;
}

Tensor f64(const Tensor& t) { return raw::contiguous(raw::cast(t, DType::F64)); }

// Calls f(x_index, w_index, y_index) for every product x[n, c, ih, iw] * w[k, c % Cg, r, s] that
// contributes to y[n, k, p, q] (terms that land in the zero padding are skipped).
template <typename F>
void for_each_term(const Geom& g, const F& f) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      int64_t grp = k / g.Kg;
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q)
          for (int64_t cl = 0; cl < g.Cg; ++cl)
            for (int64_t r = 0; r < g.R; ++r)
              for (int64_t s = 0; s < g.S; ++s) {
                int64_t ih = p * g.sh - g.ph + r * g.dh, iw = q * g.sw - g.pw + s * g.dw;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                int64_t c = grp * g.Cg + cl;
                f(((n * g.C + c) * g.H + ih) * g.W + iw, ((k * g.Cg + cl) * g.R + r) * g.S + s,
                  ((n * g.K + k) * g.P + p) * g.Q + q);
              }
    }
}

// A float64 tensor of `shape`, zeroed, into which add(out, x_index, w_index, y_index) adds every
// term of for_each_term; returned as `dtype`.
template <typename F>
Tensor sum_terms(const Geom& g, const Shape& shape, DType dtype, const F& add) {
  Tensor out = empty(shape, {.dtype = DType::F64});
  double* o = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = 0;
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { add(o, xi, wi, yi); });
  return raw::cast(out, dtype);
}

}  // namespace

Tensor conv2d_naive(const Tensor& x0, const Tensor& w0, const Conv2dParams& p) {
  Geom g = naive_geom(x0.shape(), w0.shape(), p);
  Tensor x = f64(x0), w = f64(w0);
  const double *xp = x.data<double>(), *wp = w.data<double>();
  return sum_terms(
      g, {g.N, g.K, g.P, g.Q}, x0.dtype(),
      [&](double* y, int64_t xi, int64_t wi, int64_t yi) { y[yi] += xp[xi] * wp[wi]; });
}

Tensor conv2d_backward_input_naive(const Tensor& gy0, const Tensor& w0, const Shape& x_shape,
                                   const Conv2dParams& p) {
  Geom g = naive_geom(x_shape, w0.shape(), p);
  Tensor gy = f64(gy0), w = f64(w0);
  const double *gyp = gy.data<double>(), *wp = w.data<double>();
  return sum_terms(g, x_shape, gy0.dtype(), [&](double* gx, int64_t xi, int64_t wi, int64_t yi) {
    gx[xi] += gyp[yi] * wp[wi];
  });
}

Tensor conv2d_backward_weight_naive(const Tensor& gy0, const Tensor& x0, const Shape& w_shape,
                                    const Conv2dParams& p) {
  Geom g = naive_geom(x0.shape(), w_shape, p);
  Tensor gy = f64(gy0), x = f64(x0);
  const double *gyp = gy.data<double>(), *xp = x.data<double>();
  return sum_terms(g, w_shape, gy0.dtype(), [&](double* gw, int64_t xi, int64_t wi, int64_t yi) {
    gw[wi] += gyp[yi] * xp[xi];
  });
}

}  // namespace loom::cpu
