// The CPU's one strided, broadcasting elementwise iterator. `elementwise` walks an output
// shape with up to four operands (the output first), each with its own strides (0 along broadcast
// dims), in parallel chunks (for_each_run); contiguous inner runs take a branch the compiler
// vectorizes. The dims are merged first by kernels/loop_geometry.h, shared with CUDA.
// Leaves out: reductions (kernels/cpu/cpu_reduce.cpp walks its own layout).
#pragma once

#include <array>
#include <cstdint>

#include "core/parallel.h"
#include "core/tensor.h"
#include "kernels/loop_geometry.h"

namespace loom::cpu {

constexpr int kMaxDims = kMaxLoopDims;

// Builds the loop over `shape`, reading operand k with strides st[k], with its dims merged
// (kernels/loop_geometry.h); a single element is one dim of size 1, so the walk below has a dim.
template <int NOps>
LoopGeometry<NOps> make_loop(const Shape& shape, const std::array<Strides, NOps>& st) {
  LoopGeometry<NOps> L = loop_geometry<NOps>(shape, st);
  if (L.ndim == 0) {  // a single element
    L.ndim = 1;
    L.sizes[0] = 1;
    for (int k = 0; k < NOps; ++k) L.strides[k][0] = 1;
  }
  return L;
}

// Calls body(ptrs, inner_strides, n) for runs of n elements along the innermost dim, where
// ptrs[k] points at operand k's first element of the run (typed char* of element size es[k]).
template <int NOps, typename Body>
void for_each_run(const LoopGeometry<NOps>& L, std::array<char*, NOps> base,
                  const std::array<int64_t, NOps>& es, const Body& body) {
  int64_t total = 1;
  for (int d = 0; d < L.ndim; ++d) total *= L.sizes[d];
  const int last = L.ndim - 1;
  parallel_for(0, total, kGrainSize, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`, outermost first.
    std::array<int64_t, kMaxDims> idx{};
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rem % L.sizes[d];
      rem /= L.sizes[d];
    }
    std::array<char*, NOps> p;
    for (int k = 0; k < NOps; ++k) {
      int64_t off = 0;
      for (int d = 0; d <= last; ++d) off += idx[d] * L.strides[k][d];
      p[k] = base[k] + off * es[k];
    }
    std::array<int64_t, NOps> inner;
    for (int k = 0; k < NOps; ++k) inner[k] = L.strides[k][last];
    int64_t i = begin;
    while (i < end) {
      int64_t n = std::min(L.sizes[last] - idx[last], end - i);
      body(p, inner, n);
      i += n;
      // Advance the multi-index by n along the innermost dim, carrying outward.
      idx[last] += n;
      for (int k = 0; k < NOps; ++k) p[k] += n * inner[k] * es[k];
      for (int d = last; d > 0 && idx[d] == L.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
        for (int k = 0; k < NOps; ++k)
          p[k] += (L.strides[k][d - 1] - L.sizes[d] * L.strides[k][d]) * es[k];
      }
    }
  });
}

// Strides of t read as `shape` (broadcast); the output passes its own strides.
inline Strides operand_strides(const Tensor& t, const Shape& shape) {
  return broadcast_strides(t.shape(), t.strides(), shape);
}

// out[i] = f(in[i]...) for typed operands: Out is the output element type, Ins the inputs'.
// The functor receives inputs converted to their acc_t and its result is converted to Out.
template <typename Out, typename... Ins, typename F, typename... Ts>
void elementwise(const Tensor& out, const F& f, const Ts&... in) {
  static_assert(sizeof...(Ins) == sizeof...(Ts), "one element type per input tensor");
  constexpr int N = 1 + sizeof...(Ins);
  std::array<Strides, N> st{out.strides(), operand_strides(in, out.shape())...};
  LoopGeometry<N> L = make_loop<N>(out.shape(), st);
  std::array<char*, N> base{static_cast<char*>(out.data_ptr()),
                            static_cast<char*>(in.data_ptr())...};
  std::array<int64_t, N> es{int64_t(sizeof(Out)), int64_t(sizeof(Ins))...};
  for_each_run<N>(L, base, es,
                  [&](const std::array<char*, N>& p, const std::array<int64_t, N>& s, int64_t n) {
                    [&]<size_t... K>(std::index_sequence<K...>) {
                      Out* o = reinterpret_cast<Out*>(p[0]);
                      std::tuple<const Ins*...> ip{reinterpret_cast<const Ins*>(p[K + 1])...};
                      bool contiguous = s[0] == 1 && ((s[K + 1] == 1) && ...);
                      if (contiguous) {
                        for (int64_t j = 0; j < n; ++j)
                          o[j] = Out(f(acc_t<Ins>(std::get<K>(ip)[j])...));
                      } else {
                        for (int64_t j = 0; j < n; ++j)
                          o[j * s[0]] = Out(f(acc_t<Ins>(std::get<K>(ip)[j * s[K + 1]])...));
                      }
                    }
                    (std::index_sequence_for<Ins...>{});
                  });
}

// This iterator as the Loop type the shared front-end kernels/elementwise_ops.h takes.
struct CpuLoop {
  template <typename Out, typename... Ins, typename F, typename... Ts>
  static void run(const Tensor& out, const F& f, const Ts&... in) {
    elementwise<Out, Ins...>(out, f, in...);
  }
};

}  // namespace loom::cpu
