// CPU rotary position embedding (Backend::rope, the fused section of kernels/backend_methods.inc):
// one loop over the (b, h, t) rows of x (B, H, T, D), rows in parallel, each pair (i, i + D/2)
// rotated in double by the angle of the row's position read from the cos and sin tables. Any
// strides. The naive version CUDA's kernel is tested against.
// Leaves out: building the tables (autograd/ops/rope.cpp does, once per config and device), and
// the interleaved-pairs convention (Note [Rotary embedding] in autograd/ops/rope.cpp).
#include <type_traits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

namespace {

// x (or y) element (b, h, t, d) through its strides.
struct Strides4 {
  int64_t s0, s1, s2, s3;
  int64_t at(int64_t b, int64_t h, int64_t t, int64_t d) const {
    return b * s0 + h * s1 + t * s2 + d * s3;
  }
};

Strides4 strides4(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

struct RopeRows {
  int64_t B, H, T, D;
  Strides4 xs, ys;
  const int64_t* positions;  // (B, T), or null: offset + t
  int64_t offset;
  double sign;  // +1 forward, -1 the inverse rotation
};

// Rows [lo, hi) of the B H T rows: y[i] = x[i] c - x[i + D/2] s, y[i + D/2] = x[i + D/2] c + x[i]
// s.
template <typename T, typename S>
void rope_rows(const T* x, T* y, const S* cos, const S* sin, const RopeRows& g, int64_t lo,
               int64_t hi) {
  const int64_t half = g.D / 2;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t b = r / (g.H * g.T), h = (r / g.T) % g.H, t = r % g.T;
    const int64_t pos = g.positions ? g.positions[b * g.T + t] : g.offset + t;
    for (int64_t i = 0; i < half; ++i) {
      const double c = double(cos[pos * half + i]), s = g.sign * double(sin[pos * half + i]);
      const double x1 = double(acc_t<T>(x[g.xs.at(b, h, t, i)]));
      const double x2 = double(acc_t<T>(x[g.xs.at(b, h, t, i + half)]));
      y[g.ys.at(b, h, t, i)] = T(acc_t<T>(x1 * c - x2 * s));
      y[g.ys.at(b, h, t, i + half)] = T(acc_t<T>(x2 * c + x1 * s));
    }
  }
}

// Every position in [0, P): the error names the first one outside.
void check_positions(const Tensor& positions, int64_t P) {
  const int64_t* p = positions.data<int64_t>();
  for (int64_t i = 0; i < positions.numel(); ++i)
    LOOM_CHECK(p[i] >= 0 && p[i] < P, "rope: position ", p[i], " (element ", i, " of positions ",
               describe(positions), ") is outside the table of ", P, " positions");
}

}  // namespace

// x: (B, H, T, D) any strides; cos, sin: (P, D / 2); positions: (B, T) or undefined -> y like x
Tensor CpuBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin,
                        const Tensor& positions, int64_t offset, bool inverse) {
  check_rope_args(x, cos, sin, positions, offset);
  if (positions.defined()) check_positions(positions, cos.size(0));
  Tensor y = empty_rope_output(x);
  const RopeRows g{x.size(0),
                   x.size(1),
                   x.size(2),
                   x.size(3),
                   strides4(x),
                   strides4(y),
                   data_or_null<int64_t>(positions),
                   offset,
                   inverse ? -1.0 : 1.0};
  const int64_t rows = g.B * g.H * g.T;
  LOOM_DISPATCH_FLOATING(x.dtype(), "rope", [&] {
    using S = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.D, 1)),
                 [&](int64_t lo, int64_t hi) {
                   rope_rows<scalar_t, S>(x.data<scalar_t>(), y.data<scalar_t>(), cos.data<S>(),
                                          sin.data<S>(), g, lo, hi);
                 });
  });
  return y;
}

}  // namespace loom::cpu
