// The direct (naive) CPU convolution: seven nested loops per direction, accumulating in double.
// It is the oracle the optimized im2col + GEMM kernels of cpu_conv.cpp are tested against
// (tests/kernels/cpu/test_cpu_conv.cpp), and the definition of what conv2d computes.
// Leaves out: speed. The fast path's shape arithmetic lives here too; the naive one computes its
// own (Note [Naive conv geometry] in cpu_conv_naive.cpp), so a mistake in either shows.
#pragma once

#include "kernels/backend.h"

namespace loom::cpu {

// Output extent of one spatial dim: floor((in + 2 pad - dil (k - 1) - 1) / stride) + 1.
inline int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

// The sizes of one convolution, read from x's and w's shapes (Cg = C / G, Kg = K / G).
struct ConvGeom {
  int64_t N, C, H, W, K, Cg, Kg, R, S, P, Q, G;
  int64_t sh, sw, ph, pw, dh, dw;
};

inline ConvGeom conv_geom(const Shape& x, const Shape& w, const Conv2dParams& p) {
  ConvGeom g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.K = w[0], g.Cg = w[1], g.R = w[2], g.S = w[3];
  g.G = p.groups, g.Kg = g.K / p.groups;
  g.sh = p.stride[0], g.sw = p.stride[1], g.ph = p.padding[0], g.pw = p.padding[1];
  g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.P = conv_out_size(g.H, g.R, g.sh, g.ph, g.dh);
  g.Q = conv_out_size(g.W, g.S, g.sw, g.pw, g.dw);
  return g;
}

// x: (N, C, H, W), w: (K, C/groups, R, S) -> (N, K, P, Q)
Tensor conv2d_naive(const Tensor& x, const Tensor& w, const Conv2dParams& p);
// grad_y: (N, K, P, Q), w: (K, C/groups, R, S) -> (N, C, H, W) = x_shape
Tensor conv2d_backward_input_naive(const Tensor& grad_y, const Tensor& w, const Shape& x_shape,
                                   const Conv2dParams& p);
// grad_y: (N, K, P, Q), x: (N, C, H, W) -> (K, C/groups, R, S) = w_shape
Tensor conv2d_backward_weight_naive(const Tensor& grad_y, const Tensor& x, const Shape& w_shape,
                                    const Conv2dParams& p);

}  // namespace loom::cpu
