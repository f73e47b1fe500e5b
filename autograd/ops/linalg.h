// Matrix products: matmul (1-d, 2-d and batched with broadcasting, like torch.matmul), mm, bmm,
// linear (x W^T + b), gelu_mlp (two Linears with a tanh GELU between them) and
// linear_cross_entropy (a Linear and its cross-entropy).
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
// cross_entropy(linear(x, weight) with its leading dims folded into rows, target flattened) as
// one op, a language model's classifier: x (..., C), weight (V, C), target (...) int64 with
// x's leading shape. The logits are the op's own: on CUDA their gradient is made in the same pass
// as the loss and written over them (Note [The classifier in one node] in linalg.cpp), a chunk of
// chunk_rows rows at a time (0: chunks of at most 3 x 2^27 logits; Note [The classifier in
// chunks]).
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                            Reduction r = Reduction::Mean, double label_smoothing = 0.0,
                            int64_t ignore_index = -100, int64_t chunk_rows = 0);

namespace detail {
// linear_cross_entropy's rows per chunk for M rows of V classes: M in equal chunks (the last may
// be shorter) of at most 3 x 2^27 logits, a multiple of 8 rows when there is more than one; M when
// the logits fit in one.
int64_t classifier_chunk_rows(int64_t M, int64_t V);
}  // namespace detail

}  // namespace loom
