// Matrix products: matmul (1-d, 2-d and batched with broadcasting, like torch.matmul), mm, bmm,
// linear (x W^T + b) and gelu_mlp (two Linears with a tanh GELU between them).
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
// linear(linear(x, w1, b1, GeluTanh), w2, b2) as one op, GPT-2's MLP: x (..., C), w1 (H, C),
// b1 (H) or undefined, w2 (N, H), b2 (N) or undefined -> (..., N). On CUDA the GELU's backward
// runs in the epilogue of the GEMM that makes its incoming gradient (Note [Fused MLP] in
// linalg.cpp).
Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2);

}  // namespace loom
