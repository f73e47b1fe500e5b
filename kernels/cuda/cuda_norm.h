// The per-channel statistics pass of the CUDA batch norm, exposed so tests can compare the fast
// split Welford reduction with the naive two-pass kernel kept beside it
// (kernels/cuda/cuda_norm.cu). Leaves out: the normalisation itself (CudaBackend::batch_norm) and
// the backward.
#pragma once

#include <utility>

#include "core/tensor.h"

namespace loom::cuda {

// x: (N, C, ...) on a CUDA device -> (mean, biased variance), each (C), float32 (float64 for f64).
// naive: one block per channel, two passes (sum, then sum of squared deviations) in float64;
// otherwise each channel is split over several blocks that combine Welford partials (Note [Split
// Welford] in cuda_norm.cu).
std::pair<Tensor, Tensor> batch_norm_stats(const Tensor& x, bool naive = false);

}  // namespace loom::cuda
