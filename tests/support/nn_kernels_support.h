// Helpers for the tests of the CUDA library-backed and NN kernels (matmul, conv, pool, batch
// norm): random inputs made on the CPU and moved to the GPU, float64 host copies, error norms,
// and naive float64 references for convolution and pooling written as plain loops.
// Leaves out: anything CUDA-specific (the tests include the CUDA headers themselves).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"

namespace loom::testing {

inline Device gpu() { return Device(DeviceType::CUDA, 0); }

// Normal(shift, scale) values drawn in float64 on the CPU, rounded to dt, placed on `dev`.
inline Tensor random_tensor(const Shape& s, DType dt, uint64_t seed, Device dev = kCPU,
                            double scale = 1.0, double shift = 0.0) {
  Generator gen;
  gen.manual_seed(seed);
  Tensor t = randn(s, {.dtype = DType::F64}, &gen) * scale + shift;
  return t.to(dt).to(dev);
}

inline std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

// ||got - want|| / ||want||; infinity when got has a NaN that want does not.
inline double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(want[i])) continue;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double rel_err(const Tensor& got, const std::vector<double>& want) {
  return rel_err(host(got), want);
}

// ---------------------------------------------------------------- convolution, NCHW, float64
struct ConvShape {
  int64_t N, C, H, W, K, R, S;
  Conv2dParams p;
  int64_t P() const {
    return (H + 2 * p.padding[0] - p.dilation[0] * (R - 1) - 1) / p.stride[0] + 1;
  }
  int64_t Q() const {
    return (W + 2 * p.padding[1] - p.dilation[1] * (S - 1) - 1) / p.stride[1] + 1;
  }
  int64_t Cg() const { return C / p.groups; }
};

// Calls f(n, k, c, oh, ow, ih, iw, r, s) for every multiply of the convolution.
template <typename F>
void for_each_tap(const ConvShape& g, const F& f) {
  int64_t Kg = g.K / g.p.groups;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t cg = 0; cg < g.Cg(); ++cg)
        for (int64_t oh = 0; oh < g.P(); ++oh)
          for (int64_t ow = 0; ow < g.Q(); ++ow)
            for (int64_t r = 0; r < g.R; ++r)
              for (int64_t s = 0; s < g.S; ++s) {
                int64_t ih = oh * g.p.stride[0] - g.p.padding[0] + r * g.p.dilation[0];
                int64_t iw = ow * g.p.stride[1] - g.p.padding[1] + s * g.p.dilation[1];
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                int64_t c = (k / Kg) * g.Cg() + cg;
                f(n, k, c, cg, oh, ow, ih, iw, r, s);
              }
}

inline std::vector<double> conv2d_ref(const ConvShape& g, const std::vector<double>& x,
                                      const std::vector<double>& w) {
  std::vector<double> y(size_t(g.N * g.K * g.P() * g.Q()), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t k, int64_t c, int64_t cg, int64_t oh, int64_t ow,
                      int64_t ih, int64_t iw, int64_t r, int64_t s) {
    y[((n * g.K + k) * g.P() + oh) * g.Q() + ow] +=
        x[((n * g.C + c) * g.H + ih) * g.W + iw] * w[((k * g.Cg() + cg) * g.R + r) * g.S + s];
  });
  return y;
}

inline std::vector<double> conv2d_grad_input_ref(const ConvShape& g, const std::vector<double>& gy,
                                                 const std::vector<double>& w) {
  std::vector<double> gx(size_t(g.N * g.C * g.H * g.W), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t k, int64_t c, int64_t cg, int64_t oh, int64_t ow,
                      int64_t ih, int64_t iw, int64_t r, int64_t s) {
    gx[((n * g.C + c) * g.H + ih) * g.W + iw] +=
        gy[((n * g.K + k) * g.P() + oh) * g.Q() + ow] * w[((k * g.Cg() + cg) * g.R + r) * g.S + s];
  });
  return gx;
}

inline std::vector<double> conv2d_grad_weight_ref(const ConvShape& g, const std::vector<double>& gy,
                                                  const std::vector<double>& x) {
  std::vector<double> gw(size_t(g.K * g.Cg() * g.R * g.S), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t k, int64_t c, int64_t cg, int64_t oh, int64_t ow,
                      int64_t ih, int64_t iw, int64_t r, int64_t s) {
    gw[((k * g.Cg() + cg) * g.R + r) * g.S + s] +=
        gy[((n * g.K + k) * g.P() + oh) * g.Q() + ow] * x[((n * g.C + c) * g.H + ih) * g.W + iw];
  });
  return gw;
}

// ---------------------------------------------------------------- pooling, float64
struct PoolShape {
  int64_t N, C, H, W;
  Pool2dParams p;
  int64_t P() const { return (H + 2 * p.padding[0] - p.kernel[0]) / p.stride[0] + 1; }
  int64_t Q() const { return (W + 2 * p.padding[1] - p.kernel[1]) / p.stride[1] + 1; }
};

// Max pooling: values and the argmax in each H*W plane (first maximum wins; NaN wins at once).
inline void max_pool_ref(const PoolShape& g, const std::vector<double>& x, std::vector<double>& y,
                         std::vector<int64_t>& idx) {
  y.assign(size_t(g.N * g.C * g.P() * g.Q()), 0.0);
  idx.assign(y.size(), 0);
  for (int64_t pl = 0; pl < g.N * g.C; ++pl)
    for (int64_t oh = 0; oh < g.P(); ++oh)
      for (int64_t ow = 0; ow < g.Q(); ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t arg = -1;
        bool nan = false;
        for (int64_t r = 0; r < g.p.kernel[0] && !nan; ++r)
          for (int64_t s = 0; s < g.p.kernel[1] && !nan; ++s) {
            int64_t h = oh * g.p.stride[0] - g.p.padding[0] + r,
                    w = ow * g.p.stride[1] - g.p.padding[1] + s;
            if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
            double v = x[(pl * g.H + h) * g.W + w];
            if (arg < 0) arg = h * g.W + w;
            nan = std::isnan(v);
            if (v > best || nan) best = v, arg = h * g.W + w;
          }
        size_t o = size_t((pl * g.P() + oh) * g.Q() + ow);
        y[o] = best;
        idx[o] = arg;
      }
}

// Average pooling: the window's sum over its divisor (clipped to the padded or the real input).
inline double avg_divisor_ref(const PoolShape& g, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g.p.stride[0] - g.p.padding[0], w0 = ow * g.p.stride[1] - g.p.padding[1];
  int64_t h1 = std::min(h0 + g.p.kernel[0], g.H + g.p.padding[0]);
  int64_t w1 = std::min(w0 + g.p.kernel[1], g.W + g.p.padding[1]);
  if (g.p.count_include_pad) return double((h1 - h0) * (w1 - w0));
  h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H), w1 = std::min(w1, g.W);
  return double((h1 - h0) * (w1 - w0));
}

// Visits every (output o, input i) pair of average pooling.
template <typename F>
void for_each_avg_tap(const PoolShape& g, const F& f) {
  for (int64_t pl = 0; pl < g.N * g.C; ++pl)
    for (int64_t oh = 0; oh < g.P(); ++oh)
      for (int64_t ow = 0; ow < g.Q(); ++ow)
        for (int64_t r = 0; r < g.p.kernel[0]; ++r)
          for (int64_t s = 0; s < g.p.kernel[1]; ++s) {
            int64_t h = oh * g.p.stride[0] - g.p.padding[0] + r,
                    w = ow * g.p.stride[1] - g.p.padding[1] + s;
            if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
            f((pl * g.P() + oh) * g.Q() + ow, (pl * g.H + h) * g.W + w, avg_divisor_ref(g, oh, ow));
          }
}

}  // namespace loom::testing
