// The direct convolution (see kernels/cpu/cpu_conv.h): inputs converted to float64, seven loops,
// the result converted back to the input's dtype. One loop nest per direction, written to be
// obviously right.
// Leaves out: threads, blocking, any layout but contiguous NCHW (inputs are made so first).
#include "kernels/cpu/cpu_conv.h"

#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

using Geom = ConvGeom;

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

}  // namespace

Tensor conv2d_naive(const Tensor& x0, const Tensor& w0, const Conv2dParams& p) {
  Geom g = conv_geom(x0.shape(), w0.shape(), p);
  Tensor x = f64(x0), w = f64(w0), y = empty({g.N, g.K, g.P, g.Q}, {.dtype = DType::F64});
  const double *xp = x.data<double>(), *wp = w.data<double>();
  double* yp = y.data<double>();
  for (int64_t i = 0; i < y.numel(); ++i) yp[i] = 0;
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { yp[yi] += xp[xi] * wp[wi]; });
  return raw::cast(y, x0.dtype());
}

Tensor conv2d_backward_input_naive(const Tensor& gy0, const Tensor& w0, const Shape& x_shape,
                                   const Conv2dParams& p) {
  Geom g = conv_geom(x_shape, w0.shape(), p);
  Tensor gy = f64(gy0), w = f64(w0), gx = empty(x_shape, {.dtype = DType::F64});
  const double *gyp = gy.data<double>(), *wp = w.data<double>();
  double* gxp = gx.data<double>();
  for (int64_t i = 0; i < gx.numel(); ++i) gxp[i] = 0;
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { gxp[xi] += gyp[yi] * wp[wi]; });
  return raw::cast(gx, gy0.dtype());
}

Tensor conv2d_backward_weight_naive(const Tensor& gy0, const Tensor& x0, const Shape& w_shape,
                                    const Conv2dParams& p) {
  Geom g = conv_geom(x0.shape(), w_shape, p);
  Tensor gy = f64(gy0), x = f64(x0), gw = empty(w_shape, {.dtype = DType::F64});
  const double *gyp = gy.data<double>(), *xp = x.data<double>();
  double* gwp = gw.data<double>();
  for (int64_t i = 0; i < gw.numel(); ++i) gwp[i] = 0;
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { gwp[wi] += gyp[yi] * xp[xi]; });
  return raw::cast(gw, gy0.dtype());
}

}  // namespace loom::cpu
