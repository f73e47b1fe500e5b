// Shape arithmetic, and the overflow-checked counts of core/checked_math.h.
#include "core/shape.h"

#include <limits>

#include "core/checked_math.h"
#include "core/error.h"

namespace loom {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;  // shapes of tensors passed checked_numel (core/checked_math.h)
  return n;
}

int64_t checked_numel(const char* op, const Shape& s) {
  for (int64_t d : s) LOOM_CHECK(d >= 0, op, ": negative size ", d, " in shape ", s);
  int64_t n = 1;
  for (int64_t d : s)
    LOOM_CHECK(!__builtin_mul_overflow(n, d, &n), op, ": shape ", s,
               " has more elements than int64 can count (the product of the sizes overflows)");
  return n;
}

int64_t checked_nbytes(const char* op, const Shape& s, size_t element_size) {
  int64_t n = checked_numel(op, s), bytes = 0;
  LOOM_CHECK(!__builtin_mul_overflow(n, int64_t(element_size), &bytes), op, ": shape ", s, " of ",
             element_size, "-byte elements needs more bytes than int64 can count (", n,
             " elements)");
  return bytes;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(s.size()) - 1; i > 0; --i) {
    st[i] = acc;
    // Only a tensor with a zero size (no elements, so strides address nothing) can overflow
    // here: [0, 2^40, 2^40] (found by tests/fuzz/idx_fuzz.cpp). Saturate instead of wrapping.
    if (__builtin_mul_overflow(acc, s[i], &acc)) acc = std::numeric_limits<int64_t>::max();
  }
  if (!s.empty()) st[0] = acc;
  return st;
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;  // a 0-d tensor takes 0/-1
  LOOM_CHECK(dim >= lo && dim <= hi, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
             " dims (expected a dim in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LOOM_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
               " cannot be broadcast (dim ", i, " of the result: ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Strides broadcast_strides(const Shape& s, const Strides& st, const Shape& target) {
  Strides out(target.size(), 0);
  size_t off = target.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i)
    out[off + i] = (s[i] == 1 && target[off + i] != 1) ? 0 : st[i];
  return out;
}

}  // namespace loom
