// The CUDA backend: every Backend method on NVIDIA GPUs. Kernels launch on the current stream of
// the tensor's device (core/cuda/stream.h); outputs come from the caching allocator
// (core/cuda/allocator.h). Methods are defined in one file per family:
//   cuda_copy.cu        copy_ (device<->device, host<->device), fill_, arange_, random_
//   cuda_elementwise.cu unary, where (functors of kernels/functors.h)
//   cuda_binary.cu      binary, binary_scalar, binary_ (split off to compile in parallel)
//   cuda_reduce.cu      reduce, max_dim
//   cuda_softmax_loss.cu softmax, softmax_backward, nll_loss, nll_loss_backward
//   cuda_index.cu       index_select, index_add, dropout
//   cuda_linalg.cpp     mm, bmm (cuBLASLt)
//   cuda_conv.cpp       conv2d and its two backwards (cuDNN)
//   cuda_pool.cu        max_pool2d, avg_pool2d and backwards
//   cuda_norm.cu        batch_norm, batch_norm_backward
//   cuda_optim.cu       adam_step, sgd_step (one multi-tensor launch)
// Leaves out: multi-GPU communication (distributed/).
#pragma once

#include "kernels/backend.h"

namespace loom::cuda {

class CudaBackend final : public Backend {
 public:
  void copy_(const Tensor& dst, const Tensor& src) override;
  void fill_(const Tensor& t, double value) override;
  void arange_(const Tensor& t, double start, double step) override;
  void random_(const Tensor& t, RandomKind kind, double a, double b, uint64_t seed,
               uint64_t offset) override;
  Tensor unary(UnaryOp op, const Tensor& x) override;
  Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) override;
  void binary_(BinaryOp op, const Tensor& a, const Tensor& b) override;
  Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) override;

  Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) override;
  std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) override;

  Tensor mm(const Tensor& a, const Tensor& b) override;
  Tensor bmm(const Tensor& a, const Tensor& b) override;

  Tensor softmax(const Tensor& x, int64_t dim, bool log) override;
  Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim, bool log) override;
  Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r, int64_t ignore_index) override;
  Tensor nll_loss_backward(const Tensor& grad, const Tensor& logp, const Tensor& target, Reduction r,
                           int64_t ignore_index) override;

  Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) override;
  Tensor conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Shape& x_shape,
                               const Conv2dParams& p) override;
  Tensor conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Shape& w_shape,
                                const Conv2dParams& p) override;
  std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dParams& p) override;
  Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& indices, const Shape& x_shape) override;
  Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) override;
  Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) override;

  BatchNormOut batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, bool training,
                          double momentum, double eps) override;
  BatchNormGrads batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd) override;

  std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) override;
  Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) override;
  Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) override;
  void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& p) override;
  void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, const SgdStepParams& p) override;
};

CudaBackend& cuda_backend();

}  // namespace loom::cuda
