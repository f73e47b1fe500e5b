// CPU softmax / log-softmax (forward and backward along any dim), the negative log-likelihood
// loss (forward and backward) and the fused cross-entropy (Note [Fused cross-entropy] in
// autograd/ops/softmax_loss.cpp). Rows are processed in parallel; sums accumulate in double.
// Leaves out: class weights (not in the Backend contract).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

// Note [Softmax layout]
// The row kernels below work on contiguous (rows, n) blocks, n being the size of the softmax dim.
// When dim is the last dim of a contiguous tensor that is the tensor itself (the common case:
// logits (N, C)). Otherwise the inputs are permuted so that dim is last and copied contiguous,
// the rows are processed, and the result is permuted back and copied once more. The copies cost
// two passes over memory; they keep one row kernel and one place to get the numerics right.

// Rows processed per parallel chunk: about kGrainSize elements of work.
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)); }

// float and double can hold the exp intermediate in the output row; half types recompute it.
template <typename T>
constexpr bool kStoresAcc = std::is_same_v<T, acc_t<T>>;

// y = softmax(x) or log_softmax(x) of each row of a contiguous (rows, n) block.
// Numerically stable: exp(x - max) never overflows, and the sum accumulates in double.
template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  using A = acc_t<T>;
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t j = 0; j < n; ++j) m = std::max(m, A(xr[j]));
      double s = 0;
      if (log) {
        // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round at the scale of m.
        for (int64_t j = 0; j < n; ++j) s += double(std::exp(A(xr[j]) - m));
        A log_s = A(std::log(s));
        for (int64_t j = 0; j < n; ++j) yr[j] = T((A(xr[j]) - m) - log_s);
      } else if constexpr (kStoresAcc<T>) {
        for (int64_t j = 0; j < n; ++j) {
          A v = std::exp(A(xr[j]) - m);
          yr[j] = v;
          s += double(v);
        }
        A inv = A(1.0 / s);
        for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
      } else {
        for (int64_t j = 0; j < n; ++j) s += double(std::exp(A(xr[j]) - m));
        A inv = A(1.0 / s);
        for (int64_t j = 0; j < n; ++j) yr[j] = T(std::exp(A(xr[j]) - m) * inv);
      }
    }
  });
}

// dx from dy and y for each row of contiguous (rows, n) blocks:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T>
void softmax_backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t n, bool log) {
  using A = acc_t<T>;
  parallel_for(0, rows, row_grain(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* gr = dy + r * n;
      const T* yr = y + r * n;
      T* out = dx + r * n;
      double s = 0;
      if (log) {
        for (int64_t j = 0; j < n; ++j) s += double(A(gr[j]));
        A sa = A(s);
        for (int64_t j = 0; j < n; ++j) out[j] = T(A(gr[j]) - std::exp(A(yr[j])) * sa);
      } else {
        for (int64_t j = 0; j < n; ++j) s += double(A(gr[j])) * double(A(yr[j]));
        A sa = A(s);
        for (int64_t j = 0; j < n; ++j) out[j] = T(A(yr[j]) * (A(gr[j]) - sa));
      }
    }
  });
}

// Reads element i of a 1-d tensor of int64 (any stride).
inline int64_t read_i64(const Tensor& t, int64_t i) { return t.data<int64_t>()[i * t.stride(0)]; }

// Checks every target is a class in [0, C) or ignore_index.
// `op` + `suffix` name the op in the messages ("nll_loss" + "_backward"), `what` the scores
// ("logp", or "logits" for the fused cross-entropy); they are joined only when a check fails, so
// the common path allocates nothing.
void check_targets(const char* op, const char* suffix, const Tensor& logp, const Tensor& target,
                   int64_t ignore_index, const char* what = "logp") {
  LOOM_CHECK(target.dtype() == DType::I64 && target.dim() == 1, op, suffix,
             ": target must be a 1-d int64 tensor, got ", describe(target));
  LOOM_CHECK(logp.dim() == 2 && logp.size(0) == target.size(0), op, suffix, ": ", what, " ",
             describe(logp), " must be (N, C) with N = ", target.size(0), " rows to match target");
  int64_t N = logp.size(0), C = logp.size(1);
  for (int64_t i = 0; i < N; ++i) {
    int64_t t = read_i64(target, i);
    LOOM_CHECK(t == ignore_index || (t >= 0 && t < C), op, suffix, ": target ", t, " (row ", i,
               ") is out of range [0, ", C, ") for ", what, " ", describe(logp),
               " (ignore_index is ", ignore_index, ")");
  }
}

}  // namespace

// x: any shape -> softmax or log_softmax along dim, same shape (contiguous)
Tensor CpuBackend::softmax(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  if (x.dim() > 0) dim = wrap_dim(name, dim, x.dim());
  return along_dim(
      {x}, dim, [&](const std::vector<Tensor>& c, const Tensor& out, int64_t rows, int64_t n) {
        LOOM_DISPATCH_FLOATING(x.dtype(), name, [&] {
          softmax_rows<scalar_t>(c[0].data<scalar_t>(), out.data<scalar_t>(), rows, n, log);
        });
      });
}

// grad_y, y: same shape and dtype -> dL/dx, same shape (contiguous)
Tensor CpuBackend::softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  LOOM_CHECK(grad_y.shape() == y.shape() && grad_y.dtype() == y.dtype(), name, ": grad ",
             describe(grad_y), " does not match the output ", describe(y));
  if (y.dim() > 0) dim = wrap_dim(name, dim, y.dim());
  return along_dim({grad_y, y}, dim,
                   [&](const std::vector<Tensor>& c, const Tensor& out, int64_t rows, int64_t n) {
                     LOOM_DISPATCH_FLOATING(y.dtype(), name, [&] {
                       softmax_backward_rows<scalar_t>(c[0].data<scalar_t>(), c[1].data<scalar_t>(),
                                                       out.data<scalar_t>(), rows, n, log);
                     });
                   });
}

// Note [nll_loss work]
// nll_loss reads one element per row, so it runs serially: the target check must finish before
// anything is written (an error thrown inside a parallel region would terminate), and the serial
// sum makes the Mean/Sum result deterministic. Mean divides by the number of non-ignored rows
// (NaN when every row is ignored, as in PyTorch).

// logp: (N, C), target: (N) int64 -> 0-d (Mean, Sum) or (N) (None; 0 at ignored rows)
Tensor CpuBackend::nll_loss(const Tensor& logp, const Tensor& target, Reduction r,
                            int64_t ignore_index, const char* op) {
  check_targets(op, "", logp, target, ignore_index);
  int64_t N = logp.size(0);
  int64_t s0 = logp.stride(0), s1 = logp.stride(1);
  Tensor out = empty(r == Reduction::None ? Shape{N} : Shape{}, {.dtype = logp.dtype()});
  LOOM_DISPATCH_FLOATING(logp.dtype(), "nll_loss", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* p = logp.data<scalar_t>();
    scalar_t* o = out.data<scalar_t>();
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i) {
      int64_t t = read_i64(target, i);
      double v = t == ignore_index ? 0.0 : -double(A(p[i * s0 + t * s1]));
      count += t != ignore_index;
      if (r == Reduction::None) o[i] = scalar_t(A(v));
      total += v;
    }
    if (r == Reduction::Sum) o[0] = scalar_t(A(total));
    if (r == Reduction::Mean) o[0] = scalar_t(A(total / double(count)));
  });
  return out;
}

// grad: 0-d (Mean, Sum) or (N) (None), logp: (N, C), target: (N) -> dL/dlogp: (N, C)
Tensor CpuBackend::nll_loss_backward(const Tensor& grad, const Tensor& logp, const Tensor& target,
                                     Reduction r, int64_t ignore_index, const char* op) {
  check_targets(op, "_backward", logp, target, ignore_index);
  int64_t N = logp.size(0), C = logp.size(1);
  LOOM_CHECK(r == Reduction::None ? (grad.dim() == 1 && grad.size(0) == N) : grad.numel() == 1, op,
             "_backward: grad ", describe(grad), " does not fit the reduction of ", N, " rows");
  Tensor out = empty({N, C}, {.dtype = logp.dtype()});
  fill_(out, 0.0);
  Tensor g = raw::cast(grad, logp.dtype());
  LOOM_DISPATCH_FLOATING(logp.dtype(), "nll_loss_backward", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* gp = g.data<scalar_t>();
    scalar_t* o = out.data<scalar_t>();
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i) count += read_i64(target, i) != ignore_index;
    double scale = r == Reduction::Mean ? 1.0 / double(count) : 1.0;
    int64_t gs = r == Reduction::None ? g.stride(0) : 0;
    for (int64_t i = 0; i < N; ++i) {
      int64_t t = read_i64(target, i);
      if (t != ignore_index) o[i * C + t] = scalar_t(A(-double(A(gp[i * gs])) * scale));
    }
  });
  return out;
}

// ---- fused cross-entropy: forward, one pass per row finds its log-sum-exp, its loss at the
// target and, with label smoothing, the sum of its logits; backward, one pass writes
// (softmax - (1 - ls) onehot - ls / C) times the row's gradient. The Mean/Sum total is added
// serially in double, so it does not depend on the threads.

// logits: (N, C), target: (N) int64 -> loss 0-d (Mean, Sum) or (N) (None; 0 at ignored rows) and
// lse (N), both float32 (float64 for f64 logits), scale 0-d float64
CrossEntropyOut CpuBackend::cross_entropy(const Tensor& logits, const Tensor& target, Reduction r,
                                          double label_smoothing, int64_t ignore_index) {
  check_targets("cross_entropy", "", logits, target, ignore_index, "logits");
  const int64_t N = logits.size(0), C = logits.size(1), s0 = logits.stride(0),
                s1 = logits.stride(1);
  const DType acc = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  CrossEntropyOut out{empty(r == Reduction::None ? Shape{N} : Shape{}, {.dtype = acc}),
                      empty({N}, {.dtype = acc}), empty({}, {.dtype = DType::F64})};
  const double ls = label_smoothing;
  std::vector<double> row_loss(size_t(N), 0.0);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* x = logits.data<scalar_t>();
    A* lse = out.lse.data<A>();
    parallel_for(0, N, row_grain(C), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = read_i64(target, i);
        if (t == ignore_index) {
          lse[i] = A(0);
          continue;
        }
        const scalar_t* row = x + i * s0;
        double m = -INFINITY, sum_x = 0;
        for (int64_t c = 0; c < C; ++c) m = std::max(m, double(A(row[c * s1])));
        double s = 0;
        for (int64_t c = 0; c < C; ++c) {
          const double v = double(A(row[c * s1]));
          s += std::exp(v - m);
          sum_x += v;
        }
        const double l = m + std::log(s);
        double loss = l - double(A(row[t * s1]));  // -log softmax at the target
        if (ls != 0.0) loss = (1.0 - ls) * loss + (ls / double(C)) * (double(C) * l - sum_x);
        row_loss[size_t(i)] = loss;
        lse[i] = A(l);
      }
    });
    A* o = out.loss.data<A>();
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i) {
      total += row_loss[size_t(i)];
      count += read_i64(target, i) != ignore_index;
      if (r == Reduction::None) o[i] = A(row_loss[size_t(i)]);
    }
    if (r == Reduction::Sum) o[0] = A(total);
    if (r == Reduction::Mean) o[0] = A(total / double(count));  // NaN with no rows
    out.scale.data<double>()[0] = r == Reduction::Mean ? 1.0 / double(count) : 1.0;
  });
  return out;
}

// grad: 0-d (Mean, Sum) or (N) (None) -> dL/dlogits: (N, C) contiguous
Tensor CpuBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                          const Tensor& target, const Tensor& lse,
                                          const Tensor& scale, Reduction r, double label_smoothing,
                                          int64_t ignore_index, const Tensor& into) {
  check_targets("cross_entropy", "_backward", logits, target, ignore_index, "logits");
  const int64_t N = logits.size(0), C = logits.size(1), s0 = logits.stride(0),
                s1 = logits.stride(1);
  LOOM_CHECK(r == Reduction::None ? (grad.dim() == 1 && grad.size(0) == N) : grad.numel() == 1,
             "cross_entropy_backward: grad ", describe(grad), " does not fit the reduction of ", N,
             " rows");
  check_ce_into(into, logits);
  Tensor out = into.defined() ? into : empty({N, C}, {.dtype = logits.dtype()});
  const Tensor g = raw::contiguous(raw::cast(grad, DType::F64));
  const double* gp = g.data<double>();
  const double sc = scale.data<double>()[0], ls = label_smoothing, off = ls / double(C);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy_backward", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* x = logits.data<scalar_t>();
    const A* l = lse.data<A>();
    scalar_t* o = out.data<scalar_t>();
    parallel_for(0, N, row_grain(C), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = read_i64(target, i);
        scalar_t* orow = o + i * C;
        if (t == ignore_index) {
          for (int64_t c = 0; c < C; ++c) orow[c] = scalar_t(A(0));
          continue;
        }
        const double gi = gp[r == Reduction::None ? i : 0] * sc, li = double(l[i]);
        for (int64_t c = 0; c < C; ++c) {
          double d = std::exp(double(A(x[i * s0 + c * s1])) - li) - off;
          if (c == t) d -= 1.0 - ls;
          orow[c] = scalar_t(A(gi * d));
        }
      }
    });
  });
  return out;
}

// logits (N, C) contiguous -> the forward, and the Sum's gradient written over the logits
CrossEntropyOut CpuBackend::cross_entropy_with_grad_(const Tensor& logits, const Tensor& target,
                                                     Reduction r, double label_smoothing,
                                                     int64_t ignore_index) {
  return cross_entropy_with_grad_composed(*this, logits, target, r, label_smoothing, ignore_index);
}

}  // namespace loom::cpu
