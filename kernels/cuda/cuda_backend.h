// The CUDA backend: every Backend method on NVIDIA GPUs. Kernels launch on the current stream of
// the tensor's device (core/cuda/stream.h); outputs come from the caching allocator
// (core/cuda/allocator.h). This folder holds the backend and the launch helpers every kernel
// shares (launch.h, loops.cuh, block_reduce.cuh, multi_tensor.cuh, vector_walk.cuh); the methods
// are defined in one subfolder per family:
//   elementwise/  cuda_copy.cu (copy_, fill_, arange_, random_), cuda_elementwise.cu (unary,
//                 where), cuda_binary.cu (binary, binary_scalar, binary_), cuda_reduce.cu
//                 (reduce, max_dim), cuda_index.cu (index_select, index_add, dropout), cuda_amp.cu
//                 (amp_unscale_, amp_update_scale_: the GradScaler's kernels), cuda_swiglu.cu
//                 (swiglu_backward)
//   matmul/       cuda_linalg.cpp (mm, bmm, linear through cuBLASLt: lt_matmul.cpp),
//                 cuda_fp8_mm.cpp (fp8_mm: the scaled FP8 product)
//   fp8/          cuda_fp8.cu (fp8_amax, fp8_quantize: the tensorwise FP8 cast)
//   norm/         cuda_layer_norm.cu (+ the row-in-registers fast path, cuda_layer_norm_rows.cu),
//                 cuda_rms_norm.cu (+ its fast path, cuda_rms_norm_rows.cu), cuda_batch_norm.cu
//                 (channels-last passes: cuda_batch_norm_cl.cu; batch_norm_relu_max_pool2:
//                 cuda_batch_norm_pool.cu)
//   attention/    cuda_attention.cpp (sdpa_forward, sdpa_backward: cuDNN's flash attention,
//                 cudnn_sdpa.cpp), cuda_rope.cu (rope: the rotary position embedding)
//   conv/         cuda_conv.cpp (conv2d and its two backwards through cuDNN), cuda_pool.cu
//                 (max_pool2d, avg_pool2d and backwards; channels-last: cuda_pool_cl.cu)
//   loss/         cuda_softmax_loss.cu (softmax, nll_loss and backwards), cuda_cross_entropy.cu
//                 (cross_entropy, its backward, the classifier's fused loss)
//   optim/        cuda_optim.cu (adam_step, sgd_step: one multi-tensor launch), cuda_grad_norm.cu
// Leaves out: multi-GPU communication (distributed/).
#pragma once

#include "kernels/backend.h"

namespace loom::cuda {

class CudaBackend final : public Backend {
 public:
  // The overrides of every method of kernels/backend_methods.inc.
#define LOOM_BACKEND_METHOD(R, name, params) R name params override;
#include "kernels/backend_methods.inc"
#undef LOOM_BACKEND_METHOD
};

CudaBackend& cuda_backend();

}  // namespace loom::cuda
