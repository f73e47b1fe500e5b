// A fused linear layer for the CUDA backend: y = act(x @ w^T + bias) in one cuBLASLt call, with
// the bias add and the activation done in the product's epilogue. CudaBackend::linear (what the
// loom::linear op and so nn::Linear call) runs it for float32/float16/bfloat16; tested in
// tests/kernels/cuda/matmul/test_cuda_linalg.cpp. Leaves out: the backward pass
// (autograd/ops/linalg.cpp) and f64.
#pragma once

#include "core/tensor.h"

namespace loom::cuda {

// GeluTanh is cuBLASLt's GELU, the tanh approximation; it differs from loom's exact (erf) gelu
// by less than 1e-3 absolute, so use it only where that approximation is what is wanted.
enum class Activation { None, Relu, GeluTanh };

// x: (..., K), w: (N, K), bias: (N) or undefined -> (..., N). All on one CUDA device, one dtype
// (float32, float16 or bfloat16). Float32 follows allow_tf32() (kernels/cuda/math_mode.h).
// With GeluTanh and `pre`, *pre gets the pre-activation x @ w^T + bias (..., N) from the same
// product (cuBLASLt's GELU_AUX epilogue; N must be a multiple of 8): what GELU's backward needs.
Tensor linear_fused(const Tensor& x, const Tensor& w, const Tensor& bias,
                    Activation act = Activation::None, Tensor* pre = nullptr);

}  // namespace loom::cuda
