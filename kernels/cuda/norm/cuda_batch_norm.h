// The CUDA batch norm's pieces shared between files: the per-channel statistics pass, exposed so
// tests can compare the fast split Welford reduction with the naive two-pass kernel kept beside
// it (kernels/cuda/norm/cuda_batch_norm.cu), and the channels-last passes
// (kernels/cuda/norm/cuda_batch_norm_cl.cu) that CudaBackend::batch_norm and batch_norm_backward
// call for channels-last inputs. CudaBackend::batch_norm_relu_max_pool2
// (kernels/cuda/norm/cuda_batch_norm_pool.cu) shares the statistics and the finalize steps through
// bn_coefficients and bn_backward_finalize. Leaves out: the finalize kernels and the NCHW passes
// (private to cuda_batch_norm.cu).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/tensor.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

// x: (N, C, ...) on a CUDA device -> (mean, biased variance), each (C), float32 (float64 for f64).
// naive: one block per channel, two passes (sum, then sum of squared deviations) in float64;
// otherwise each channel is split over several blocks that combine Welford partials (Note [Split
// Welford] in cuda_batch_norm.cu).
std::pair<Tensor, Tensor> batch_norm_stats(const Tensor& x, bool naive = false);

// Welford partials (C, S) of a per-channel reduction: count, mean and M2 of each of S shares.
struct NormPartials {
  Tensor n, mean, m2;
  int64_t S = 0;
};

// Partial sums (C, S) of dy and dy (x - mean) for the backward.
struct NormSums {
  Tensor sdy, sdyx;
  int64_t S = 0;
};

// The channels-last passes (Note [Channels-last reductions]); x, gy, relu_y (optional), y and gx
// are channels-last (N, C, H, W) with M = N H W > 0; mean, scale, shift, k, off, slope are (C) in
// the accumulate dtype (float32, float64 for f64).
NormPartials bn_stats_partials_cl(const Tensor& x, cudaStream_t stream);
// residual (undefined: none): added before the ReLU, in x's layout.
void bn_apply_cl(const Tensor& x, const Tensor& residual, const Tensor& y, const Tensor& mean,
                 const Tensor& scale, const Tensor& shift, bool relu, cudaStream_t stream);
NormSums bn_backward_partials_cl(const Tensor& gy, const Tensor& x, const Tensor& relu_y,
                                 const Tensor& mean, cudaStream_t stream);
void bn_backward_apply_cl(const Tensor& gy, const Tensor& x, const Tensor& relu_y, const Tensor& gx,
                          const Tensor& mean, const Tensor& k, const Tensor& off,
                          const Tensor& slope, cudaStream_t stream);

// The forward's per-channel coefficients of x (N, C, ...), NCHW or channels-last: with batch
// statistics (training, or no running stats) the split statistics pass and the finalize, which
// also updates the running stats in training; in eval the running stats. mean and invstd are
// what the backward reads (save_mean, save_invstd); y = fma(x - mean, scale, shift) (bn_pre in
// cuda_batch_norm_finalize.cuh). Every tensor (C), in the accumulate dtype (float32, float64 for
// f64). weight and bias: (C) or undefined, any strides. The caller checks the geometry and holds
// the DeviceGuard.
// t made contiguous; an undefined t (no weight, no bias) stays undefined.
inline Tensor contiguous_if_defined(const Tensor& t) {
  return t.defined() ? raw::contiguous(t) : Tensor();
}

struct BnCoefficients {
  Tensor mean, invstd, scale, shift;
};
BnCoefficients bn_coefficients(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool training,
                               double momentum, double eps);

// How many shares (blocks) a per-channel reduction splits each of C channels of M values into:
// about 4 blocks per multiprocessor, each >= 2048 values (Note [Split Welford] in
// cuda_batch_norm.cu).
int64_t bn_splits(int64_t C, int64_t M, int device);

// The backward's finalize over the partial sums of a pass: writes the parameter gradients gw, gb
// (C) in the weight's dtype (undefined without a weight) and returns the input gradient's
// coefficients (C) in invstd's (the accumulate) dtype: dx = k (dy - off - (x - mean) slope).
// T: x's element type.
struct BnBackwardCoefficients {
  Tensor k, off, slope;
};
template <typename T>
BnBackwardCoefficients bn_backward_finalize(const NormSums& sums, int64_t C, int64_t M,
                                            const Tensor& weight, const Tensor& invstd,
                                            const Tensor& gw, const Tensor& gb,
                                            cudaStream_t stream);

}  // namespace loom::cuda
