// Naive float64 reference implementations for the op table: plain loops over row-major host
// arrays, written for obviousness, never speed. Every loom op is compared against one of these.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/ops/ops.h"

namespace loom::ref {

// A row-major float64 host array.
struct Array {
  Shape shape;
  std::vector<double> v;
  int64_t numel() const { return loom::numel(shape); }
  double& at(const std::vector<int64_t>& idx) { return v[flat(idx)]; }
  double at(const std::vector<int64_t>& idx) const { return v[flat(idx)]; }
  int64_t flat(const std::vector<int64_t>& idx) const {
    int64_t f = 0;
    for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
    return f;
  }
};

inline Array from(const Tensor& t) { return Array{t.shape(), t.to_vector<double>()}; }
inline Array zeros(const Shape& s) {
  return Array{s, std::vector<double>(size_t(loom::numel(s)), 0.0)};
}

// Multi-index of flat position i in shape s.
inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}

// Value of a (broadcast to `out`) at the multi-index idx of `out`.
inline double bcast_at(const Array& a, const std::vector<int64_t>& idx, const Shape& out) {
  size_t off = out.size() - a.shape.size();
  int64_t f = 0;
  for (size_t d = 0; d < a.shape.size(); ++d)
    f = f * a.shape[d] + (a.shape[d] == 1 ? 0 : idx[off + d]);
  return a.v[f];
}

inline Array map(const Array& a, const std::function<double(double)>& f) {
  Array o{a.shape, a.v};
  for (double& x : o.v) x = f(x);
  return o;
}

inline Array map2(const Array& a, const Array& b, const std::function<double(double, double)>& f) {
  Shape s = broadcast_shapes("ref", a.shape, b.shape);
  Array o = zeros(s);
  for (int64_t i = 0; i < o.numel(); ++i) {
    auto idx = unravel(i, s);
    o.v[i] = f(bcast_at(a, idx, s), bcast_at(b, idx, s));
  }
  return o;
}

// Reduce over `dims` (sorted, non-negative) with keepdim semantics controlled by `keep`.
inline Array reduce(const Array& a, const std::vector<int64_t>& dims, bool keep,
                    const std::function<double(const std::vector<double>&)>& f) {
  std::vector<bool> red(a.shape.size(), dims.empty());
  for (int64_t d : dims) red[d] = true;
  Shape ks = a.shape, os;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (red[d]) ks[d] = 1;
    if (!red[d] || keep) os.push_back(ks[d]);
  }
  std::vector<std::vector<double>> groups(size_t(loom::numel(ks)));
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = unravel(i, a.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      if (red[d]) idx[d] = 0;
    int64_t f = 0;
    for (size_t d = 0; d < ks.size(); ++d) f = f * ks[d] + idx[d];
    groups[f].push_back(a.v[i]);
  }
  Array o{os, {}};
  for (auto& g : groups) o.v.push_back(f(g));
  return o;
}

inline Array matmul2d(const Array& a, const Array& b) {
  int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
  Array o = zeros({M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a.v[i * K + k] * b.v[k * N + j];
      o.v[i * N + j] = s;
    }
  return o;
}

}  // namespace loom::ref
