// The 4-value loads and stores of the norms' row-in-registers fast paths
// (kernels/cuda/norm/cuda_layer_norm_rows.cu, kernels/cuda/norm/cuda_rms_norm_rows.cu): 4 values
// of any dtype read as float32 in one load, written back from float32 in one store.
// Leaves out: the alignment checks (each fast path's host side declines misaligned tensors).
#pragma once

#include "kernels/cuda/loops.cuh"

namespace loom::cuda {

// 4 values at p (aligned to 4 of them) as float32, and back.
template <typename T>
__device__ __forceinline__ void load4(const T* p, float (&out)[4]) {
  const Vec<T, 4> k = *reinterpret_cast<const Vec<T, 4>*>(p);
#pragma unroll
  for (int e = 0; e < 4; ++e) out[e] = float(k.v[e]);
}
template <typename T>
__device__ __forceinline__ void store4(T* p, const float (&in)[4]) {
  Vec<T, 4> k;
#pragma unroll
  for (int e = 0; e < 4; ++e) k.v[e] = T(in[e]);
  *reinterpret_cast<Vec<T, 4>*>(p) = k;
}

// The 4 values of p (a weight or bias row) at column c, or `fill` in each without one (p null).
template <typename T>
__device__ __forceinline__ void load4_or(const T* p, int c, float fill, float (&out)[4]) {
  if (p)
    load4(p + c, out);
  else
    out[0] = out[1] = out[2] = out[3] = fill;
}

}  // namespace loom::cuda
