// Matrix products: matmul (1-d, 2-d and batched with broadcasting, like torch.matmul), mm, bmm,
// and linear (x W^T + b).
// Leaves out: decompositions and solvers.
#pragma once

#include "core/tensor.h"
#include "kernels/params.h"

namespace loom {

Tensor mm(const Tensor& a, const Tensor& b);   // (M, K) @ (K, N) -> (M, N)
Tensor bmm(const Tensor& a, const Tensor& b);  // (B, M, K) @ (B, K, N) -> (B, M, N)
Tensor matmul(const Tensor& a, const Tensor& b);
// act(x W^T + b). x: (..., in), weight: (out, in), bias: (out) or undefined -> (..., out).
// One fused kernel on CUDA (Note [Fused linear] in linalg.cpp); act = Relu is relu(linear(...)).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              LinearActivation act = LinearActivation::None);

}  // namespace loom
