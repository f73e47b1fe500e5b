// CPU fused cross-entropy (Backend::cross_entropy and cross_entropy_backward; Note [Fused
// cross-entropy] in autograd/ops/softmax_loss.cpp). Forward: one pass per row finds its
// log-sum-exp, its loss at the target and, with label smoothing, the sum of its logits. Backward:
// one pass writes (softmax - (1 - ls) onehot - ls / C) times the row's gradient. Rows run in
// parallel; the Mean/Sum total is added serially in double, so it does not depend on the threads.
// Leaves out: class weights (not in the Backend contract).
#include <cmath>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

int64_t target_at(const Tensor& t, int64_t i) { return t.data<int64_t>()[i * t.stride(0)]; }

// The checks and messages of nll_loss's (cpu_softmax_loss.cpp), naming the logits.
void check_targets(const char* suffix, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index) {
  LOOM_CHECK(target.dtype() == DType::I64 && target.dim() == 1, "cross_entropy", suffix,
             ": target must be a 1-d int64 tensor, got ", describe(target));
  LOOM_CHECK(logits.dim() == 2 && logits.size(0) == target.size(0), "cross_entropy", suffix,
             ": logits ", describe(logits), " must be (N, C) with N = ", target.size(0),
             " rows to match target");
  const int64_t N = logits.size(0), C = logits.size(1);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = target_at(target, i);
    LOOM_CHECK(t == ignore_index || (t >= 0 && t < C), "cross_entropy", suffix, ": target ", t,
               " (row ", i, ") is out of range [0, ", C, ") for logits ", describe(logits),
               " (ignore_index is ", ignore_index, ")");
  }
}

int64_t rows_per_chunk(int64_t C) {
  return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(C, 1));
}

}  // namespace

// logits: (N, C), target: (N) int64 -> loss 0-d (Mean, Sum) or (N) (None; 0 at ignored rows),
// lse (N), scale 0-d
CrossEntropyOut CpuBackend::cross_entropy(const Tensor& logits, const Tensor& target, Reduction r,
                                          double label_smoothing, int64_t ignore_index) {
  check_targets("", logits, target, ignore_index);
  const int64_t N = logits.size(0), C = logits.size(1), s0 = logits.stride(0),
                s1 = logits.stride(1);
  const DType acc = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  CrossEntropyOut out{empty(r == Reduction::None ? Shape{N} : Shape{}, {.dtype = logits.dtype()}),
                      empty({N}, {.dtype = acc}), empty({}, {.dtype = DType::F64})};
  const double ls = label_smoothing;
  std::vector<double> row_loss(size_t(N), 0.0);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* x = logits.data<scalar_t>();
    A* lse = out.lse.data<A>();
    parallel_for(0, N, rows_per_chunk(C), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = target_at(target, i);
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
    scalar_t* o = out.loss.data<scalar_t>();
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i) {
      total += row_loss[size_t(i)];
      count += target_at(target, i) != ignore_index;
      if (r == Reduction::None) o[i] = scalar_t(A(row_loss[size_t(i)]));
    }
    if (r == Reduction::Sum) o[0] = scalar_t(A(total));
    if (r == Reduction::Mean) o[0] = scalar_t(A(total / double(count)));  // NaN with no rows
    out.scale.data<double>()[0] = r == Reduction::Mean ? 1.0 / double(count) : 1.0;
  });
  return out;
}

// grad: 0-d (Mean, Sum) or (N) (None) -> dL/dlogits: (N, C) contiguous
Tensor CpuBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                          const Tensor& target, const Tensor& lse,
                                          const Tensor& scale, Reduction r, double label_smoothing,
                                          int64_t ignore_index) {
  check_targets("_backward", logits, target, ignore_index);
  const int64_t N = logits.size(0), C = logits.size(1), s0 = logits.stride(0),
                s1 = logits.stride(1);
  LOOM_CHECK(r == Reduction::None ? (grad.dim() == 1 && grad.size(0) == N) : grad.numel() == 1,
             "cross_entropy_backward: grad ", describe(grad), " does not fit the reduction of ", N,
             " rows");
  Tensor out = empty({N, C}, {.dtype = logits.dtype()});
  const Tensor g = raw::contiguous(raw::cast(grad, DType::F64));
  const double* gp = g.data<double>();
  const double sc = scale.data<double>()[0], ls = label_smoothing, off = ls / double(C);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy_backward", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* x = logits.data<scalar_t>();
    const A* l = lse.data<A>();
    scalar_t* o = out.data<scalar_t>();
    parallel_for(0, N, rows_per_chunk(C), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = target_at(target, i);
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

}  // namespace loom::cpu
