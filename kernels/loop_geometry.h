// The host-side geometry of an elementwise loop, written once for the CPU iterator
// (kernels/cpu/loops.h) and the CUDA launcher (kernels/cuda/loops.cuh): an output shape and each
// operand's element strides (0 along broadcast dims), with adjacent dims merged where every
// operand walks the pair as one run.
// Leaves out: walking the geometry (each backend's loop), reductions (kernels/reduce_layout.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/error.h"
#include "core/shape.h"

namespace loom {

constexpr int kMaxLoopDims = 16;

// A loop over `ndim` dims of `sizes` (outermost first); operand k (0 = the output) moves by
// strides[k][d] elements along dim d.
template <int N>
struct LoopGeometry {
  int ndim = 0;
  std::array<int64_t, kMaxLoopDims> sizes{};
  std::array<std::array<int64_t, kMaxLoopDims>, N> strides{};
};

// The order the loop walks `shape`'s dims in, outermost first: by the output's (operand 0's)
// strides, largest first, ties in shape order. For a contiguous output that is the shape's own
// order; for a channels-last (N, C, H, W) output it is N, H, W, C, so that operands sharing the
// output's layout merge into one flat run (Note [Channels-last] in core/tensor_views.h).
template <int N>
std::array<size_t, kMaxLoopDims> walk_order(const Shape& shape, const std::array<Strides, N>& st) {
  std::array<size_t, kMaxLoopDims> order{};
  for (size_t d = 0; d < shape.size(); ++d) order[d] = d;
  const Strides& out = st[0];
  // Insertion sort: at most 16 dims, and nothing moves when the output is contiguous.
  for (size_t i = 1; i < shape.size(); ++i)
    for (size_t j = i; j > 0 && out[order[j - 1]] < out[order[j]]; --j)
      std::swap(order[j - 1], order[j]);
  return order;
}

// The loop over `shape` reading operand k with strides st[k]. With merge_dims, the dims are
// walked in walk_order, size-1 dims are dropped and a dim merges into the one outside it when
// every operand's outer stride is its stride times its size, so a contiguous tensor (or tensors
// of one permuted dense layout) becomes one flat dim (and a single element none). Without, the
// dims are `shape`'s as they are (the CUDA naive kernel walks them so).
template <int N>
LoopGeometry<N> loop_geometry(const Shape& shape, const std::array<Strides, N>& st,
                              bool merge_dims = true) {
  LOOM_CHECK(shape.size() <= size_t(kMaxLoopDims), "elementwise: tensors of ", shape.size(),
             " dims are not supported (at most ", kMaxLoopDims, ")");
  LoopGeometry<N> L;
  std::array<size_t, kMaxLoopDims> order{};
  if (merge_dims)
    order = walk_order<N>(shape, st);
  else
    for (size_t d = 0; d < shape.size(); ++d) order[d] = d;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t d = order[i];
    if (merge_dims && shape[d] == 1) continue;  // size-1 dims never move the pointers
    bool merge = merge_dims && L.ndim > 0;
    for (int k = 0; k < N && merge; ++k) merge = L.strides[k][L.ndim - 1] == st[k][d] * shape[d];
    if (merge) {
      L.sizes[L.ndim - 1] *= shape[d];
      for (int k = 0; k < N; ++k) L.strides[k][L.ndim - 1] = st[k][d];
    } else {
      L.sizes[L.ndim] = shape[d];
      for (int k = 0; k < N; ++k) L.strides[k][L.ndim] = st[k][d];
      ++L.ndim;
    }
  }
  return L;
}

}  // namespace loom
