// fp8_linear: a Linear whose three matrix products run in FP8 with per-tensor dynamic scales, the
// "tensorwise" recipe of torchao's float8 training (docs/fp8.md, Note [FP8 linear] in
// autograd/ops/fp8_linear.cpp). What nn::convert_to_fp8 (nn/fp8.h) makes a Linear run.
// Leaves out: rowwise and block scales, delayed scaling (amax history), FP8 outputs or FP8
// activations kept between layers, FP8 all-gathers.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom {

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N), in the autocast dtype (bfloat16)
// under autocast, else in x's dtype. x float32 or bfloat16; weight float32 or bfloat16 (a master
// weight is quantised from float32 as it is: no bfloat16 copy); bias any floating dtype. When K, N
// or the number of rows M = x.numel() / K is not a multiple of 16 it runs loom::linear instead.
// On CUDA it needs a GPU with FP8 tensor cores (compute capability 8.9 and up) and says so.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Whether fp8_linear runs its FP8 products for M rows, K in features and N out features: all
// three multiples of 16 (cuBLASLt's FP8 kernels' requirement, kept on the CPU too so both devices
// take the same path).
bool fp8_linear_applies(int64_t M, int64_t K, int64_t N);

}  // namespace loom
