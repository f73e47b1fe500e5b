// A Welford state (count, mean, M2) and Chan et al.'s pairwise merge, shared by the CUDA batch
// norm's statistics passes (kernels/cuda/norm/cuda_batch_norm.cu for NCHW, cuda_batch_norm_cl.cu
// for channels-last). Merging states rather than adding sums and sums of squares keeps the variance
// accurate when |mean| >> std.
// Leaves out: the per-value update (the passes sum shifted values instead: Note [Shifted sums]).
#pragma once

#include <cstdint>

namespace loom::cuda {

template <typename A>
struct Welford {
  int64_t n = 0;
  A mean = 0, m2 = 0;
  __device__ void merge(int64_t nb, A mb, A m2b) {
    if (nb == 0) return;
    int64_t nt = n + nb;
    A d = mb - mean, fb = A(nb) / A(nt);
    mean += d * fb;
    m2 += m2b + d * d * A(n) * fb;
    n = nt;
  }
  // The state of n values whose shifted sums are s1 = sum(v - K) and s2 = sum((v - K)^2).
  __device__ static Welford from_shifted(int64_t n, A K, A s1, A s2) {
    Welford w;
    if (n > 0) {
      w.n = n;
      w.mean = K + s1 / A(n);
      w.m2 = s2 - s1 * s1 / A(n);
      if (w.m2 < A(0)) w.m2 = A(0);
    }
    return w;
  }
};

}  // namespace loom::cuda
