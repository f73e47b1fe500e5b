// The CPU backend: Eigen for matrix products, the strided iterator of kernels/cpu/loops.h for
// elementwise math, plain loops elsewhere, all parallel over one OpenMP pool.
// Its methods are defined in one file per family: cpu_elementwise.cpp, cpu_reduce.cpp,
// cpu_linalg.cpp, cpu_softmax_loss.cpp, cpu_conv.cpp, cpu_pool.cpp, cpu_norm.cpp, cpu_index.cpp,
// cpu_optim.cpp.
// Leaves out: BLAS libraries (Eigen's GEMM is the CPU reference and fast enough to match them).
#pragma once

#include "kernels/backend.h"

namespace loom::cpu {

class CpuBackend final : public Backend {
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

CpuBackend& cpu_backend();

}  // namespace loom::cpu
