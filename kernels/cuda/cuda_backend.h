// The CUDA backend: every Backend method on NVIDIA GPUs. Kernels launch on the current stream of
// the tensor's device (core/cuda/stream.h); outputs come from the caching allocator
// (core/cuda/allocator.h). Methods are defined in one file per family:
//   cuda_copy.cu          copy_ (device<->device, host<->device), fill_, arange_, random_
//   cuda_elementwise.cu   unary, where (functors of kernels/functors.h)
//   cuda_binary.cu        binary, binary_scalar, binary_ (split off to compile in parallel)
//   cuda_reduce.cu        reduce, max_dim
//   cuda_linalg.cpp       mm, bmm, linear (cuBLASLt, lt_matmul.cpp)
//   cuda_softmax_loss.cu  softmax, softmax_backward, nll_loss, nll_loss_backward
//   cuda_cross_entropy.cu cross_entropy, cross_entropy_backward, cross_entropy_with_grad_
//   cuda_conv.cpp         conv2d and its two backwards (cuDNN)
//   cuda_pool.cu          max_pool2d, avg_pool2d and backwards
//   cuda_norm.cu          batch_norm, batch_norm_backward (channels-last passes: cuda_norm_cl.cu)
//   cuda_norm_pool.cu     batch_norm_relu_max_pool2 and its backward
//   cuda_index.cu         index_select, index_add, dropout
//   cuda_optim.cu         adam_step, sgd_step (one multi-tensor launch)
//   cuda_amp.cu           amp_unscale_, amp_update_scale_ (the GradScaler's kernels)
//   cuda_attention.cpp    sdpa_forward, sdpa_backward (cuDNN's flash attention, cudnn_sdpa.cpp)
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
