// CPU reductions. The input is viewed as (outer, inner) rows with the reduced dims innermost
// (a copy only when the layout needs one); the column case (reducing the leading dims of a
// contiguous tensor, e.g. a bias gradient) reduces in place without the copy. Sums accumulate in
// double on the CPU, so float32 sums are accurate to the last bit that matters.
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"
#include "kernels/reduce_layout.h"

namespace loom::cpu {

namespace {

template <typename T>
using sum_t = std::conditional_t<std::is_floating_point_v<acc_t<T>>, double, int64_t>;

// Reduces each row of a contiguous (rows, n) block.
template <typename T>
void reduce_rows(ReduceOp op, const T* x, T* out, int64_t rows, int64_t n) {
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const T* p = x + r * n;
                   if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
                     sum_t<T> s = 0;
                     for (int64_t j = 0; j < n; ++j) s += sum_t<T>(acc_t<T>(p[j]));
                     out[r] = T(acc_t<T>(op == ReduceOp::Mean ? s / sum_t<T>(n) : s));
                   } else {
                     acc_t<T> m = acc_t<T>(p[0]);
                     for (int64_t j = 1; j < n; ++j) {
                       acc_t<T> v = acc_t<T>(p[j]);
                       bool take = op == ReduceOp::Max ? (v > m) : (v < m);
                       if (take || v != v) m = v;
                       if (m != m) break;  // NaN wins
                     }
                     out[r] = T(m);
                   }
                 }
               });
}

// Reduces the leading `rows` of a contiguous (rows, cols) block into (cols).
template <typename T>
void reduce_cols(ReduceOp op, const T* x, T* out, int64_t rows, int64_t cols) {
  parallel_for(0, cols, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(rows, 1)),
               [&](int64_t b, int64_t e) {
                 std::vector<sum_t<T>> s(e - b, 0);
                 std::vector<acc_t<T>> m(e - b);
                 for (int64_t c = b; c < e; ++c) m[c - b] = acc_t<T>(x[c]);
                 for (int64_t r = 0; r < rows; ++r) {
                   const T* p = x + r * cols;
                   if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
                     for (int64_t c = b; c < e; ++c) s[c - b] += sum_t<T>(acc_t<T>(p[c]));
                   } else {
                     for (int64_t c = b; c < e; ++c) {
                       acc_t<T> v = acc_t<T>(p[c]);
                       acc_t<T>& cur = m[c - b];
                       if (op == ReduceOp::Max ? (v > cur || v != v) : (v < cur || v != v))
                         cur = cur != cur ? cur : v;
                     }
                   }
                 }
                 for (int64_t c = b; c < e; ++c) {
                   if (op == ReduceOp::Sum)
                     out[c] = T(acc_t<T>(s[c - b]));
                   else if (op == ReduceOp::Mean)
                     out[c] = T(acc_t<T>(s[c - b] / sum_t<T>(rows)));
                   else
                     out[c] = T(m[c - b]);
                 }
               });
}

}  // namespace

Tensor CpuBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims_in,
                          bool keepdim) {
  const ReduceLayout L = checked_reduce_layout(op, x.shape(), x.dtype(), dims_in, keepdim);
  Tensor out = reduce_result(*this, op, x, L);
  if (L.inner == 0) return out;
  LOOM_DISPATCH_NUMERIC(x.dtype(), reduce_name(op), [&] {
    // Column case: the reduced dims lead and x is contiguous.
    if (L.reduced_dims_lead && x.is_contiguous() && L.outer > 1) {
      reduce_cols<scalar_t>(op, x.data<scalar_t>(), out.data<scalar_t>(), L.inner, L.outer);
      return;
    }
    Tensor xc = raw::contiguous(raw::permute(x, L.perm));
    reduce_rows<scalar_t>(op, xc.data<scalar_t>(), out.data<scalar_t>(), L.outer, L.inner);
  });
  return out;
}

std::pair<Tensor, Tensor> CpuBackend::max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  const ReduceLayout L = max_dim_layout(x.shape(), dim, keepdim);
  const int64_t n = x.size(dim);
  Tensor xc = raw::contiguous(raw::permute(x, L.perm));
  Tensor values = empty(L.out_shape, {.dtype = x.dtype()});
  Tensor indices = empty(L.out_shape, {.dtype = DType::I64});
  int64_t rows = values.numel();
  LOOM_DISPATCH_NUMERIC(x.dtype(), "max", [&] {
    const scalar_t* p = xc.data<scalar_t>();
    scalar_t* v = values.data<scalar_t>();
    int64_t* ix = indices.data<int64_t>();
    parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const scalar_t* row = p + r * n;
        acc_t<scalar_t> best = acc_t<scalar_t>(row[0]);
        int64_t arg = 0;
        for (int64_t j = 1; j < n && best == best; ++j) {
          acc_t<scalar_t> cur = acc_t<scalar_t>(row[j]);
          if (cur > best || cur != cur) {
            best = cur;
            arg = j;
          }
        }
        v[r] = scalar_t(best);
        ix[r] = arg;
      }
    });
  });
  return {values, indices};
}

}  // namespace loom::cpu
