// Warp and block reductions with shuffles, shared by the reduction, softmax and loss kernels.
// A combine functor `c(a, b)` merges two partial results; every thread passes its own value.
// Leaves out: cooperative-groups and cub (two small functions say what happens).
#pragma once

#include <cuda_runtime.h>

namespace loom::cuda {

constexpr int kWarpSize = 32;

// The combine functor of a sum.
struct Plus {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

// The combination of the values of the 32 lanes, returned in every lane (butterfly exchange).
template <typename T, typename C>
__device__ __forceinline__ T warp_reduce(T v, const C& c) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = c(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The combination over the whole block, returned in every thread. `identity` fills the unused
// lanes of the last step. blockDim.x must be a multiple of 32 (at most 1024); the block's threads
// must all call it (it synchronises). Uses 32 values of shared memory.
template <typename T, typename C>
__device__ __forceinline__ T block_reduce(T v, const C& c, T identity) {
  __shared__ alignas(16) unsigned char raw[kWarpSize * sizeof(T)];
  T* shared = reinterpret_cast<T*>(raw);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int nwarps = blockDim.x / kWarpSize;
  v = warp_reduce(v, c);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : identity;
  return warp_reduce(v, c);
}

}  // namespace loom::cuda
