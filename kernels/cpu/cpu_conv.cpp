// CPU convolution as im2col + GEMM (cpu::gemm: OpenBLAS or Eigen), in all three directions
// (forward, input gradient via col2im, weight gradient). Images run in parallel on the one OpenMP
// pool, each thread with its own reused column buffer. f16/bf16 compute in float32. The direct
// loops it is tested against are in cpu_conv_naive.cpp. Leaves out: Winograd/FFT algorithms, NHWC
// layouts, and the bias (the op layer adds it).
#include "kernels/cpu/cpu_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

// Note [Convolution as GEMM]
// For one image n and one group, gather the input patches into a column matrix
//   col (Cg*R*S, P*Q):  col[(c, r, s), (p, q)] = x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw]
// (zero where that lands in the padding). Then, with the weight as a (Kg, Cg*R*S) matrix:
//   forward          y[n]  (Kg, P*Q)     = w  @ col
//   input gradient   dcol  (Cg*R*S, P*Q) = w^T @ dy[n], scattered back into dx[n] by col2im
//   weight gradient  dw    (Kg, Cg*R*S) += dy[n] @ col^T, summed over the images
// A 1x1 convolution with stride 1 and no padding needs no col: x[n] already is (C, H*W).
// Threads: with several images, each thread takes a contiguous run of them and runs the GEMM
// single-threaded (cpu::gemm sees it is inside a parallel region), so the col buffer and the
// GEMM's working set stay in that core's cache. The weight gradient keeps one partial sum per
// thread, added in thread order so the result does not depend on timing. With one image the
// loop runs inline and the GEMM uses the threads itself.

namespace {

// C (M, N) = op(A) op(B) on densely stored operands: A stored (M, K), or (K, M) when trans_a;
// B stored (K, N), or (N, K) when trans_b.
template <typename T>
GemmArgs<T> plain(int64_t M, int64_t N, int64_t K, const T* A, bool trans_a, const T* B,
                  bool trans_b, T* C) {
  GemmArgs<T> a;
  a.M = M, a.N = N, a.K = K;
  a.A = A, a.trans_a = trans_a, a.lda = trans_a ? M : K;
  a.B = B, a.trans_b = trans_b, a.ldb = trans_b ? K : N;
  a.C = C, a.ldc = N;
  return a;
}

// A thread's column buffer, kept between calls so a training loop allocates it once. Buffers
// over kKeepBytes are freed after the call instead of being kept.
constexpr size_t kKeepBytes = size_t(64) << 20;

template <typename T>
class ColumnBuffer {
 public:
  explicit ColumnBuffer(int64_t n) : buf_(storage()) {
    if (buf_.size() < size_t(n)) buf_.resize(size_t(n));
  }
  ~ColumnBuffer() {
    if (buf_.size() * sizeof(T) > kKeepBytes) std::vector<T>().swap(buf_);
  }
  T* data() { return buf_.data(); }

 private:
  static std::vector<T>& storage() {
    thread_local std::vector<T> b;
    return b;
  }
  std::vector<T>& buf_;
};

bool is_pointwise(const ConvGeom& g) {
  return g.R == 1 && g.S == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// The range [q0, q1) of output columns whose input column q*sw - pw + s*dw lies in [0, W).
inline void valid_cols(const ConvGeom& g, int64_t s, int64_t& q0, int64_t& q1) {
  int64_t lo = g.pw - s * g.dw;            // need q*sw >= lo
  int64_t hi = g.W - 1 + g.pw - s * g.dw;  // need q*sw <= hi
  q0 = lo <= 0 ? 0 : (lo + g.sw - 1) / g.sw;
  q1 = hi < 0 ? 0 : std::min(g.Q, hi / g.sw + 1);
  q1 = std::max(q0, q1);
}

// Note [Flat im2col rows]
// With stride 1 and an output as wide as the input (Q == W: "same" padding such as 3x3 with
// padding 1), the col row of (c, r, s) is the input plane read at a constant flat offset
// off = (r*dh - ph) * W + (s*dw - pw): col[p*W + q] = x[p*W + q + off]. So one long copy fills
// the valid rows, and only the |s*dw - pw| columns at the left or right edge of each row (which
// the flat copy filled from the neighbouring row) are set to zero afterwards. col2im runs the
// same way backwards: zero those edge entries of the (scratch) col row, then one long add.
// Any other geometry goes row by row.

bool flat_rows(const ConvGeom& g) { return g.sh == 1 && g.sw == 1 && g.Q == g.W; }

// For a flat row (c, r, s): valid output rows [p0, p1), valid columns [q0, q1), the flat offset,
// and the flat range [lo, hi) of the row that maps inside the input plane.
struct FlatRow {
  int64_t p0, p1, q0, q1, off, lo, hi;
};

FlatRow flat_row(const ConvGeom& g, int64_t r, int64_t s) {
  const int64_t dr = r * g.dh - g.ph, ds = s * g.dw - g.pw;
  FlatRow f;
  f.p0 = std::clamp<int64_t>(-dr, 0, g.P), f.p1 = std::clamp<int64_t>(g.H - dr, f.p0, g.P);
  f.q0 = std::clamp<int64_t>(-ds, 0, g.Q), f.q1 = std::clamp<int64_t>(g.W - ds, f.q0, g.Q);
  f.off = dr * g.W + ds;
  // A kernel row that lies wholly in the padding (an image of one row under a 3x3 "same"
  // convolution) gives -off beyond the col row's end: lo stops at P*W (= P*Q), the row's length.
  f.lo = std::min(std::max(f.p0 * g.W, -f.off), g.P * g.W);
  f.hi = std::max(f.lo, std::min(f.p1 * g.W, g.H * g.W - f.off));
  return f;
}

// Calls f(row, plane, r, s) for each row (c, r, s) of a col matrix (Cg*R*S, P*Q) and plane c of
// the image x (Cg, H, W) it is made from or added to.
template <typename T, typename X, typename F>
void for_each_col_row(T* col, X* x, const ConvGeom& g, const F& f) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s)
        f(col + ((c * g.R + r) * g.S + s) * g.P * g.Q, x + c * g.H * g.W, r, s);
}

// Zeroes what a flat copy put in a col row at the taps left and right of the image (columns
// q < q0 and q >= q1 of the rows p0..p1).
template <typename T>
void zero_side_taps(T* row, const FlatRow& f, int64_t Q) {
  for (int64_t p = f.p0; p < f.p1; ++p) {
    T* out = row + p * Q;
    for (int64_t q = 0; q < f.q0; ++q) out[q] = T(0);
    for (int64_t q = f.q1; q < Q; ++q) out[q] = T(0);
  }
}

// x: (Cg, H, W) of one image and group -> col: (Cg*R*S, P*Q)
template <typename T>
void im2col(const T* x, const ConvGeom& g, T* col) {
  const int64_t PQ = g.P * g.Q;
  const bool flat = flat_rows(g);
  for_each_col_row(col, x, g, [&](T* row, const T* xc, int64_t r, int64_t s) {
    if (flat) {
      FlatRow f = flat_row(g, r, s);
      std::fill(row, row + f.lo, T(0));
      std::memcpy(row + f.lo, xc + f.lo + f.off, size_t(f.hi - f.lo) * sizeof(T));
      std::fill(row + f.hi, row + PQ, T(0));
      zero_side_taps(row, f, g.Q);
      return;
    }
    int64_t q0, q1;
    valid_cols(g, s, q0, q1);
    const int64_t shift = s * g.dw - g.pw;
    for (int64_t p = 0; p < g.P; ++p) {
      T* out = row + p * g.Q;
      int64_t ih = p * g.sh - g.ph + r * g.dh;
      if (ih < 0 || ih >= g.H) {
        std::fill(out, out + g.Q, T(0));
        continue;
      }
      const T* xr = xc + ih * g.W;
      std::fill(out, out + q0, T(0));
      if (g.sw == 1) {
        std::memcpy(out + q0, xr + q0 + shift, size_t(q1 - q0) * sizeof(T));
      } else {
        for (int64_t q = q0; q < q1; ++q) out[q] = xr[q * g.sw + shift];
      }
      std::fill(out + q1, out + g.Q, T(0));
    }
  });
}

// col: (Cg*R*S, P*Q) -> dx: (Cg, H, W) of one image and group, accumulated (dx += ...).
// col is scratch: the flat path zeroes its out-of-range entries first.
template <typename T>
void col2im(T* col, const ConvGeom& g, T* dx) {
  const bool flat = flat_rows(g);
  for_each_col_row(col, dx, g, [&](T* row, T* xc, int64_t r, int64_t s) {
    if (flat) {
      FlatRow f = flat_row(g, r, s);
      zero_side_taps(row, f, g.Q);
      for (int64_t i = f.lo; i < f.hi; ++i) xc[i + f.off] += row[i];  // inside the plane
      return;
    }
    int64_t q0, q1;
    valid_cols(g, s, q0, q1);
    const int64_t shift = s * g.dw - g.pw;
    for (int64_t p = 0; p < g.P; ++p) {
      int64_t ih = p * g.sh - g.ph + r * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      const T* in = row + p * g.Q;
      T* xr = xc + ih * g.W;
      if (g.sw == 1) {
        for (int64_t q = q0; q < q1; ++q) xr[q + shift] += in[q];
      } else {
        for (int64_t q = q0; q < q1; ++q) xr[q * g.sw + shift] += in[q];
      }
    }
  });
}

// Runs f(n, col) for every image n: in parallel runs of images when there are several, else
// inline (see Note [Convolution as GEMM]). col holds col_size elements, private to the thread.
template <typename T, typename F>
void for_each_image(int64_t N, int64_t col_size, const F& f) {
  parallel_for(0, N, 1, [&](int64_t b, int64_t e) {
    ColumnBuffer<T> col(col_size);
    for (int64_t n = b; n < e; ++n) f(n, col.data());
  });
}

// x: (N, C, H, W), w: (K, Cg, R, S) -> y: (N, K, P, Q), all contiguous
template <typename T>
void conv_forward(const T* x, const T* w, T* y, const ConvGeom& g) {
  const int64_t CRS = g.Cg * g.R * g.S, PQ = g.P * g.Q;
  const bool direct = is_pointwise(g);
  for_each_image<T>(g.N, direct ? 0 : CRS * PQ, [&](int64_t n, T* col) {
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const T* xg = x + (n * g.C + grp * g.Cg) * g.H * g.W;
      if (!direct) im2col(xg, g, col);
      // y[n] (Kg, PQ) = w (Kg, CRS) @ col (CRS, PQ)
      gemm(plain(g.Kg, PQ, CRS, w + grp * g.Kg * CRS, false, direct ? xg : col, false,
                 y + (n * g.K + grp * g.Kg) * PQ));
    }
  });
}

// gy: (N, K, P, Q), w: (K, Cg, R, S) -> gx: (N, C, H, W), all contiguous
template <typename T>
void conv_backward_input(const T* gy, const T* w, T* gx, const ConvGeom& g) {
  const int64_t CRS = g.Cg * g.R * g.S, PQ = g.P * g.Q, HW = g.H * g.W;
  const bool direct = is_pointwise(g);
  for_each_image<T>(g.N, direct ? 0 : CRS * PQ, [&](int64_t n, T* col) {
    for (int64_t grp = 0; grp < g.G; ++grp) {
      T* gxg = gx + (n * g.C + grp * g.Cg) * HW;
      // dcol (CRS, PQ) = w^T (CRS, Kg) @ dy[n] (Kg, PQ), straight into dx[n] when pointwise
      gemm(plain(CRS, PQ, g.Kg, w + grp * g.Kg * CRS, true, gy + (n * g.K + grp * g.Kg) * PQ, false,
                 direct ? gxg : col));
      if (!direct) {
        std::fill(gxg, gxg + g.Cg * HW, T(0));
        col2im(col, g, gxg);
      }
    }
  });
}

// gy: (N, K, P, Q), x: (N, C, H, W) -> gw: (K, Cg, R, S), all contiguous
template <typename T>
void conv_backward_weight(const T* gy, const T* x, T* gw, const ConvGeom& g) {
  const int64_t CRS = g.Cg * g.R * g.S, PQ = g.P * g.Q, wsize = g.K * CRS;
  const bool direct = is_pointwise(g);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(num_threads(), g.N));
  // Part 0 accumulates straight into gw; the others into their own partial sums.
  std::vector<T> partial(size_t((parts - 1) * wsize));
  parallel_for(0, parts, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      T* acc = t == 0 ? gw : partial.data() + (t - 1) * wsize;
      std::fill(acc, acc + wsize, T(0));
      ColumnBuffer<T> col(direct ? 0 : CRS * PQ);
      for (int64_t n = t * g.N / parts; n < (t + 1) * g.N / parts; ++n)
        for (int64_t grp = 0; grp < g.G; ++grp) {
          const T* xg = x + (n * g.C + grp * g.Cg) * g.H * g.W;
          if (!direct) im2col(xg, g, col.data());
          // dw (Kg, CRS) += dy[n] (Kg, PQ) @ col^T (PQ, CRS)
          GemmArgs<T> a = plain(g.Kg, CRS, PQ, gy + (n * g.K + grp * g.Kg) * PQ, false,
                                direct ? xg : col.data(), true, acc + grp * g.Kg * CRS);
          a.accumulate = true;
          gemm(a);
        }
    }
  });
  for (int64_t t = 1; t < parts; ++t) {
    const T* p = partial.data() + (t - 1) * wsize;
    for (int64_t i = 0; i < wsize; ++i) gw[i] += p[i];
  }
}

// Runs kernel<float or double>(a, b, out) on contiguous copies of a and b; half precision goes
// through float32 and is rounded once at the end. terms: how many products each output element
// sums; with none (an empty channel or batch dimension) the output is zeros and kernel is not run.
template <typename K>
Tensor run_float(const char* op, const Tensor& a, const Tensor& b, const Shape& out_shape,
                 int64_t terms, const K& kernel) {
  DType dt = a.dtype();
  LOOM_CHECK(is_floating(dt), op, ": dtype ", dtype_name(dt),
             " is not supported (expected a floating type)");
  DType compute = dt == DType::F64 ? DType::F64 : DType::F32;
  Tensor ac = raw::contiguous(raw::cast(a, compute)), bc = raw::contiguous(raw::cast(b, compute));
  Tensor out = empty(out_shape, {.dtype = compute});
  if (out.numel() == 0) return raw::cast(out, dt);
  auto run = [&](const auto* ap, const auto* bp, auto* outp) {
    if (terms == 0)
      std::fill(outp, outp + out.numel(), 0);
    else
      kernel(ap, bp, outp);
  };
  if (compute == DType::F64)
    run(ac.data<double>(), bc.data<double>(), out.data<double>());
  else
    run(ac.data<float>(), bc.data<float>(), out.data<float>());
  return raw::cast(out, dt);
}

}  // namespace

Tensor CpuBackend::conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  ConvGeom g = conv_geom(x.shape(), w.shape(), p);
  return run_float("conv2d", x, w, {g.N, g.K, g.P, g.Q}, g.Cg * g.R * g.S,
                   [&](const auto* xp, const auto* wp, auto* yp) { conv_forward(xp, wp, yp, g); });
}

Tensor CpuBackend::conv2d_backward_input(const Tensor& grad_y, const Tensor& w,
                                         const Shape& x_shape, const Conv2dParams& p) {
  ConvGeom g = conv_geom(x_shape, w.shape(), p);
  return run_float(
      "conv2d_backward_input", grad_y, w, x_shape, g.K * g.P * g.Q,
      [&](const auto* gyp, const auto* wp, auto* gxp) { conv_backward_input(gyp, wp, gxp, g); });
}

Tensor CpuBackend::conv2d_backward_weight(const Tensor& grad_y, const Tensor& x,
                                          const Shape& w_shape, const Conv2dParams& p) {
  ConvGeom g = conv_geom(x.shape(), w_shape, p);
  return run_float(
      "conv2d_backward_weight", grad_y, x, w_shape, g.N * g.P * g.Q,
      [&](const auto* gyp, const auto* xp, auto* gwp) { conv_backward_weight(gyp, xp, gwp, g); });
}

}  // namespace loom::cpu
