// The RMS norm's fast path on CUDA (Note [RMS norm, a row in registers] in cuda_rms_norm_rows.cu):
// float32, bfloat16 or float16 rows of N <= 8192 values, N a multiple of 4, each thread's share of
// a row in registers and read 4 values at a time: a warp per row up to 1024 values, a block per row
// above. cuda_rms_norm.cu calls these first and runs its general kernels (any N, float64,
// misaligned data) when they decline.
// Leaves out: the checks of the arguments (CudaBackend::rms_norm and rms_norm_backward make them)
// and the second stage of the weight's column sums (rms_norm_weight_finish in cuda_rms_norm.cu).
#pragma once

#include "kernels/backend.h"

namespace loom::cuda {

// Forward: out.y and out.rstd (allocated by the caller) from x (M, N) and the optional weight, as
// the general forward kernel computes them. Returns false, launching nothing, when the fast path
// does not take these tensors.
bool rms_norm_forward_rows(const Tensor& x, const Tensor& w, double eps, RmsNormOut& out);

// Backward: r.grad_input (allocated by the caller) from dy, x, w and rstd, and with `sums` each
// block's column sums of dy * round_x(x rstd) over its rows, in a fixed order, into `partials`
// (made here: (blocks, N) float32, one row per block). Returns false, launching and allocating
// nothing, when the fast path does not take these tensors.
bool rms_norm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            RmsNormGrads& r, bool sums, Tensor& partials);

}  // namespace loom::cuda
