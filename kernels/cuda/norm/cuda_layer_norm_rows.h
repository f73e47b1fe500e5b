// The layer norm's fast path on CUDA (Note [Layer norm, a row in registers] in
// cuda_layer_norm_rows.cu): float32 rows of N <= 1024 values, N a multiple of 4, each lane's share
// of a row in registers and read 4 values at a time. cuda_layer_norm.cu calls these first and
// runs its general kernels (any N, float64, float16 inputs) when they decline.
// Leaves out: the checks of the arguments (CudaBackend::layer_norm and layer_norm_backward make
// them) and the second stage of the column sums (layer_norm_param_finish_kernel).
#pragma once

#include "kernels/backend.h"

namespace loom::cuda {

// Forward: out.y (and out.sum with a residual), out.mean and out.rstd written from x (M, N) and
// the optional residual, weight and bias, as layer_norm_forward_kernel does. Returns false,
// launching nothing, when the fast path does not take these tensors.
bool layer_norm_forward_rows(const Tensor& x, const Tensor& res, const Tensor& w, const Tensor& b,
                             double eps, LayerNormOut& out);

// Rows per block of layer_norm_backward_rows: the column sums come out as one partial row per
// block, ceil(M / kLayerNormRowsPerBlock) of them.
constexpr int64_t kLayerNormRowsPerBlock = 64;

// Backward: r.grad_input (and r.grad_input_low) from dy, x, w, mean, rstd and the optional `add`,
// as layer_norm_dx_kernel does, and with `sums` each block's partial sums of dy xhat and dy over
// its rows, in a fixed order, into pw and pb (made here: (ceil(M / 64), N) float32). Returns false,
// launching and allocating nothing, when the fast path does not take these tensors.
bool layer_norm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& mean, const Tensor& rstd, const Tensor& add,
                              LayerNormGrads& r, bool sums, Tensor& pw, Tensor& pb);

}  // namespace loom::cuda
