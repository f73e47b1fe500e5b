// Vector walks: how a kernel reads a tensor viewed as (A, C, L) in vectors of V elements without
// a division per load, and how the host picks V (kernels/cuda/norm/cuda_batch_norm.cu uses both:
// its passes over the batch-norm activations are memory-bound, so every load is 16 bytes wide).
// Leaves out: strided tensors (the callers make theirs contiguous) and the launch shapes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/loops.cuh"

namespace loom::cuda {

// Note [Vector walks]
// The passes over x read V elements per load (16 bytes: V = 4 for float32, 8 for the half types,
// 2 for float64) when L % V == 0 and every pointer is aligned to V elements; otherwise V = 1. So
// x (N, C, L) is read as (N, C, Lv) vectors, Lv = L / V. A thread visits vectors `step` apart
// and keeps its position (a, l) = (t / Lv, t % Lv) by adding (step / Lv, step % Lv) with a carry:
// a 64-bit division per vector would cost more than the load it indexes. The channel reductions
// walk t over channel c's N * Lv vectors (a = n; the vector lies at (n C + c) Lv + l); the
// elementwise passes walk t over the whole tensor (a = n C + c) and carry the channel c = a % C
// the same way.
struct Walk {
  int64_t t, a, l, da, dl;
  __device__ Walk(int64_t t0, int64_t step, int64_t Lv)
      : t(t0), a(t0 / Lv), l(t0 % Lv), da(step / Lv), dl(step % Lv) {}
  // Returns whether a moved one further than da (the carry).
  __device__ bool next(int64_t step, int64_t Lv) {
    t += step, a += da, l += dl;
    if (l < Lv) return false;
    l -= Lv, ++a;
    return true;
  }
};

// The elementwise passes' walk (Note [Vector walks]) over x (N, C, Lv) read as vectors: calls
// f(t, c) for each vector t this thread takes (grid-stride over the whole tensor), c its channel.
template <typename F>
__device__ __forceinline__ void for_each_channel_vector(int64_t N, int64_t C, int64_t Lv,
                                                        const F& f) {
  const int64_t total = N * C * Lv, step = int64_t(gridDim.x) * blockDim.x;
  Walk w(int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step, Lv);
  int64_t c = w.a % C, dc = w.da % C;
  while (w.t < total) {
    f(w.t, c);
    c += dc + (w.next(step, Lv) ? 1 : 0);
    if (c >= C) c -= C;
  }
}

// The widest vector width V (Note [Vector walks]) that divides L and to which every pointer (null:
// absent) is aligned; 1 when none is.
template <typename T>
int vec_width_for(int64_t L, std::initializer_list<const void*> ptrs) {
  for (int V = int(16 / sizeof(T)); V > 1; V /= 2) {
    bool ok = L % V == 0;
    for (const void* p : ptrs) ok = ok && (p == nullptr || aligned_to(p, sizeof(T) * V));
    if (ok) return V;
  }
  return 1;
}

// Calls f(std::integral_constant<int, V>{}) with V = width if the kernels are instantiated for it
// (the widest, half of it, 1), else with the next narrower instantiated width.
template <typename T, typename F>
void with_vec_width(int width, const F& f) {
  constexpr int kWide = int(16 / sizeof(T)), kHalf = kWide / 2 > 1 ? kWide / 2 : 1;
  if (width >= kWide) return f(std::integral_constant<int, kWide>{});
  if (width >= kHalf) return f(std::integral_constant<int, kHalf>{});
  f(std::integral_constant<int, 1>{});
}

}  // namespace loom::cuda
