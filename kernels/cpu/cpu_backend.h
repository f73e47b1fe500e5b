// The CPU backend: every Backend method on the host. Matrix products and convolutions run on
// OpenBLAS when loom was built with it and on Eigen's GEMM otherwise (kernels/cpu/cpu_gemm.h);
// elementwise math on the strided iterator of kernels/cpu/loops.h; plain loops elsewhere, all
// parallel over one OpenMP pool (core/parallel.h). Methods are defined in one file per family:
//   cpu_elementwise.cpp  copy_, fill_, arange_, random_, unary, binary, binary_scalar, binary_,
//                        where (functors of kernels/functors.h)
//   cpu_reduce.cpp       reduce, max_dim
//   cpu_linalg.cpp       mm, bmm, linear (through cpu_gemm.cpp)
//   cpu_softmax_loss.cpp softmax, softmax_backward, nll_loss, nll_loss_backward, cross_entropy,
//                        cross_entropy_backward, cross_entropy_with_grad_
//   cpu_conv.cpp         conv2d and its two backwards (the naive reference: cpu_conv_naive.cpp)
//   cpu_pool.cpp         max_pool2d, avg_pool2d and backwards
//   cpu_norm.cpp         batch_norm, batch_norm_backward
//   cpu_norm_pool.cpp    batch_norm_relu_max_pool2 and its backward
//   cpu_index.cpp        index_select, index_add, dropout
//   cpu_optim.cpp        adam_step, sgd_step
//   cpu_amp.cpp          amp_unscale_, amp_update_scale_ (the GradScaler's kernels)
//   cpu_fp8.cpp          fp8_amax, fp8_quantize, fp8_mm (FP8 emulated: the CUDA kernels' oracle)
//   cpu_attention.cpp    sdpa_forward, sdpa_backward (naive float64 loops: CUDA's twin)
//   cpu_rms_norm.cpp     rms_norm, rms_norm_backward (Llama's norm)
//   cpu_rope.cpp         rope (rotary position embedding, and its inverse for the backward)
//   cpu_swiglu.cpp       swiglu_backward (the forward is the elementwise op Swiglu)
// Leaves out: SIMD intrinsics (loops are written for the compiler to vectorize) and threads
// other than the one pool.
#pragma once

#include "kernels/backend.h"

namespace loom::cpu {

class CpuBackend final : public Backend {
 public:
  // The overrides of every method of kernels/backend_methods.inc.
#define LOOM_BACKEND_METHOD(R, name, params) R name params override;
#include "kernels/backend_methods.inc"
#undef LOOM_BACKEND_METHOD
};

CpuBackend& cpu_backend();

}  // namespace loom::cpu
