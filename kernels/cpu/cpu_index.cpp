// CPU indexing kernels: index_select, index_copy_, index_select's adjoint index_add (repeated
// indices accumulate), embedding's deterministic backward, and dropout, whose mask is drawn from
// Philox exactly as the CUDA kernel draws it.
// Leaves out: gather/scatter with an index tensor per element, and negative (wrapped) indices.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/layout.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

// The entries of a 1-d int64 index, each checked to lie in [0, size).
std::vector<int64_t> read_index(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  LOOM_CHECK(index.dtype() == DType::I64 && index.dim() == 1, op,
             ": index must be a 1-d int64 tensor, got ", describe(index));
  std::vector<int64_t> idx(size_t(index.size(0)));
  const int64_t* p = index.data<int64_t>();
  for (int64_t k = 0; k < index.size(0); ++k) {
    int64_t v = p[k * index.stride(0)];
    LOOM_CHECK(v >= 0 && v < size, op, ": index ", v, " (position ", k,
               ") is out of range for dim ", dim, " of size ", size);
    idx[size_t(k)] = v;
  }
  return idx;
}

}  // namespace

// x: (..., n, ...) with n at `dim`, index: (K) int64 -> (..., K, ...)
Tensor CpuBackend::index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  dim = wrap_dim("index_select", dim, x.dim());
  std::vector<int64_t> idx = read_index("index_select", index, dim, x.size(dim));
  Shape out_shape = x.shape();
  int64_t K = int64_t(idx.size());
  out_shape[dim] = K;
  Tensor out = empty(out_shape, {.dtype = x.dtype()});
  Tensor xc = raw::contiguous(x);
  DimSplit s = split_at(x.shape(), dim);
  // Each (outer, k) pair copies one contiguous run of `inner` elements.
  const size_t run = size_t(s.inner) * x.element_size();
  const char* src = static_cast<const char*>(xc.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, s.outer * K, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(s.inner, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   int64_t o = r / K, k = r % K;
                   std::memcpy(dst + size_t(r) * run, src + size_t(o * s.n + idx[size_t(k)]) * run,
                               run);
                 }
               });
  return out;
}

// dst: (..., n, ...) contiguous, index: (K), src: (..., K, ...): each (outer, k) run of `inner`
// elements of src copied to run index[k] of dst.
void CpuBackend::index_copy_(const Tensor& dst, int64_t dim, const Tensor& index,
                             const Tensor& src) {
  dim = wrap_dim("index_copy_", dim, dst.dim());
  std::vector<int64_t> idx = read_index("index_copy_", index, dim, dst.size(dim));
  Shape want = dst.shape();
  want[size_t(dim)] = int64_t(idx.size());
  LOOM_CHECK(src.shape() == want, "index_copy_: source ", describe(src), " does not match ", want,
             " (", describe(dst), " with dim ", dim, " replaced by the index length)");
  Tensor sc = raw::contiguous(src);
  DimSplit s = split_at(dst.shape(), dim);
  const int64_t K = int64_t(idx.size());
  const size_t run = size_t(s.inner) * dst.element_size();
  const char* from = static_cast<const char*>(sc.data_ptr());
  char* to = static_cast<char*>(dst.data_ptr());
  for (int64_t o = 0; o < s.outer; ++o)  // in k order, so a repeated index keeps its last row
    for (int64_t k = 0; k < K; ++k)
      std::memcpy(to + size_t(o * s.n + idx[size_t(k)]) * run, from + size_t(o * K + k) * run, run);
}

// Note [index_add without races]
// Repeated indices make several source runs land on one output run, so the work is split along
// axes that never collide: over `outer` slabs when there are enough of them, else over columns
// of the inner run (each thread then walks every k for its own columns). Either way each output
// element is written by one thread, in index order, so the result is deterministic.

// src: (..., K, ...), index: (K) int64 -> zeros(shape) with out[..., index[k], ...] += src[..., k,
// ...]
Tensor CpuBackend::index_add(const Shape& shape, int64_t dim, const Tensor& index,
                             const Tensor& src) {
  dim = wrap_dim("index_add", dim, int64_t(shape.size()));
  std::vector<int64_t> idx = read_index("index_add", index, dim, shape[dim]);
  Shape want = shape;
  want[dim] = int64_t(idx.size());
  LOOM_CHECK(src.shape() == want, "index_add: source ", describe(src), " does not match ", want,
             " (the output shape ", shape, " with dim ", dim, " replaced by the index length)");
  Tensor out = empty(shape, {.dtype = src.dtype()});
  fill_(out, 0.0);
  Tensor sc = raw::contiguous(src);
  DimSplit s = split_at(shape, dim);
  int64_t K = int64_t(idx.size());
  LOOM_DISPATCH_NUMERIC(src.dtype(), "index_add", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* sp = sc.data<scalar_t>();
    scalar_t* op = out.data<scalar_t>();
    // Adds the columns [c0, c1) of every source run of slab o into the output.
    auto add_slab = [&](int64_t o, int64_t c0, int64_t c1) {
      for (int64_t k = 0; k < K; ++k) {
        const scalar_t* in = sp + (o * K + k) * s.inner;
        scalar_t* to = op + (o * s.n + idx[size_t(k)]) * s.inner;
        for (int64_t c = c0; c < c1; ++c) to[c] = scalar_t(A(A(to[c]) + A(in[c])));
      }
    };
    int64_t work_per_slab = std::max<int64_t>(1, K * s.inner);
    if (s.outer >= num_threads() || s.inner == 1) {
      parallel_for(0, s.outer, std::max<int64_t>(1, kGrainSize / work_per_slab),
                   [&](int64_t b, int64_t e) {
                     for (int64_t o = b; o < e; ++o) add_slab(o, 0, s.inner);
                   });
    } else {
      parallel_for(0, s.inner, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, K * s.outer)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t o = 0; o < s.outer; ++o) add_slab(o, b, e);
                   });
    }
  });
  return out;
}

// Note [Deterministic embedding backward]
// embedding's gradient adds the rows of grad (N, D) into the rows of a (V, D) table, ids[p] naming
// the row of position p; a GPT repeats frequent tokens thousands of times in a batch. Atomic adds
// (CUDA's index_add) sum those repeats in whatever order the threads arrive, so the low bits of
// the result change from run to run. Here the positions are first put in order of id, stably (a
// counting sort on the CPU, a radix sort on CUDA), so each row's positions stay in increasing
// order; then each output row is summed by one thread per column, position after position, in
// acc_t (float32 for f16/bf16, which is also more accurate than rounding at every add) and
// rounded once. The order of the additions is thus fixed by the ids alone: the same bits on
// every run, with any number of threads, and on both backends. A row no id names is zero.

// grad: (N, D), ids: (N) int64 in [0, num_rows) -> (num_rows, D)
Tensor CpuBackend::embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num_rows) {
  LOOM_CHECK(grad.dim() == 2 && ids.dim() == 1 && ids.size(0) == grad.size(0),
             "embedding_backward: expected grad (N, D) and ids (N), got ", describe(grad), " and ",
             describe(ids));
  LOOM_CHECK(num_rows >= 0, "embedding_backward: num_rows ", num_rows, " is negative");
  std::vector<int64_t> idx = read_index("embedding_backward", ids, 0, num_rows);
  const int64_t N = grad.size(0), D = grad.size(1), V = num_rows;
  // Counting sort: start[v] .. start[v + 1] are row v's positions in `order`, increasing.
  std::vector<int64_t> start(static_cast<size_t>(V) + 1, 0), order(static_cast<size_t>(N));
  for (int64_t v : idx) ++start[size_t(v) + 1];
  for (int64_t v = 0; v < V; ++v) start[size_t(v) + 1] += start[size_t(v)];
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t p = 0; p < N; ++p) order[size_t(next[size_t(idx[size_t(p)])]++)] = p;
  }
  Tensor out = empty({V, D}, {.dtype = grad.dtype()});
  if (out.numel() == 0) return out;
  Tensor gc = raw::contiguous(grad);
  LOOM_DISPATCH_FLOATING(grad.dtype(), "embedding_backward", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* gp = gc.data<scalar_t>();
    scalar_t* op = out.data<scalar_t>();
    const int64_t per_row = std::max<int64_t>(1, D * (N / std::max<int64_t>(V, 1) + 1));
    parallel_for(0, V, std::max<int64_t>(1, kGrainSize / per_row), [&](int64_t b, int64_t e) {
      std::vector<A> acc(static_cast<size_t>(D));
      for (int64_t v = b; v < e; ++v) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t k = start[size_t(v)]; k < start[size_t(v) + 1]; ++k) {
          const scalar_t* row = gp + order[size_t(k)] * D;
          for (int64_t c = 0; c < D; ++c) acc[size_t(c)] += A(row[c]);
        }
        for (int64_t c = 0; c < D; ++c) op[v * D + c] = scalar_t(acc[size_t(c)]);
      }
    });
  });
  return out;
}

// Note [Dropout mask]
// Element i (in row-major order of x) is kept when philox_uniform(seed, offset, i, f64) >= p,
// with f64 true for float64 tensors only -- the same draw random_ makes for a Uniform fill, so
// the mask equals (rand(x.shape(), dtype) >= p) for the same generator state, and the CUDA
// kernel, which evaluates the same function, reproduces it bit for bit. Kept elements carry
// 1 / (1 - p) rounded to x's dtype; y = x * mask is computed in acc_t and rounded once. With
// p == 1 nothing is kept (the uniform draw is < 1), so the mask is all zeros.

// x: any shape -> (y, mask), both x's shape and dtype, contiguous
std::pair<Tensor, Tensor> CpuBackend::dropout(const Tensor& x, double p, uint64_t seed,
                                              uint64_t offset) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  Tensor xc = raw::contiguous(x);
  Tensor y = empty(x.shape(), {.dtype = x.dtype()});
  Tensor mask = empty(x.shape(), {.dtype = x.dtype()});
  const bool f64 = x.dtype() == DType::F64;
  LOOM_DISPATCH_FLOATING(x.dtype(), "dropout", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t keep_value = scalar_t(A(1.0 / (1.0 - p)));
    const scalar_t* xp = xc.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    scalar_t* mp = mask.data<scalar_t>();
    parallel_for(0, x.numel(), kGrainSize / 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        bool keep = philox_uniform(seed, offset, uint64_t(i), f64) >= p;
        scalar_t m = keep ? keep_value : scalar_t(A(0));
        mp[i] = m;
        yp[i] = scalar_t(A(xp[i]) * A(m));
      }
    });
  });
  return {y, mask};
}

}  // namespace loom::cpu
