// Backend: the interface between the op layer (autograd/ops) and the kernels of one device type.
// Ops call backend_of(...) and one method; the CPU backend (kernels/cpu) and the CUDA backend
// (kernels/cuda) implement every method. Methods allocate their outputs on the inputs' device and
// never record autograd.
// Leaves out: device and dtype checks that name the user's op (the op layer does those first and
// passes only valid inputs); broadcasting for binary ops and copies is the backend's job.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/functors.h"

namespace loom {

enum class ReduceOp { Sum, Mean, Max, Min };
enum class Reduction { None, Mean, Sum };
enum class RandomKind { Uniform, Normal, Int };  // Uniform [a, b); Normal (mean a, std b); Int [a, b)

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2}, stride{2, 2}, padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
};

struct BatchNormOut {
  Tensor y;            // x's shape
  Tensor save_mean;    // (C), f32 (float64 for f64 inputs); empty in eval
  Tensor save_invstd;  // (C)
};

struct BatchNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // weight/bias grads undefined when weight undefined
};

// Hyper-parameters of one fused Adam/AdamW update (see Note [Fused optimizer steps]).
struct AdamStepParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay before the update
  bool amsgrad = false;
  int64_t step = 1;  // the number of this update (1 for the first), for bias correction
};

// Hyper-parameters of one fused SGD update.
struct SgdStepParams {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffers are new: buf = d_p (PyTorch's first step)
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- memory ----
  // dst[...] = src[...] with src broadcast to dst's shape; dtypes may differ (converting), and
  // devices may differ when one side is the CPU or both are this backend's devices.
  virtual void copy_(const Tensor& dst, const Tensor& src) = 0;
  virtual void fill_(const Tensor& t, double value) = 0;
  virtual void arange_(const Tensor& t, double start, double step) = 0;  // t contiguous, 1-d
  // Fills t (contiguous) from Philox with counters [offset, offset + numel).
  virtual void random_(const Tensor& t, RandomKind kind, double a, double b, uint64_t seed,
                       uint64_t offset) = 0;

  // ---- elementwise ----
  virtual Tensor unary(UnaryOp op, const Tensor& x) = 0;
  // Broadcasting; the result is contiguous; bool for comparisons, else a's dtype (== b's).
  virtual Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) = 0;
  // op(a, s) or, with scalar_first, op(s, a); s is converted to a's dtype.
  virtual Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) = 0;
  // In place: a = op(a, b), b broadcast to a's shape; a may be strided.
  virtual void binary_(BinaryOp op, const Tensor& a, const Tensor& b) = 0;
  // cond (bool) ? a : b, all three broadcast together.
  virtual Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) = 0;

  // ---- reductions ----
  // dims: sorted, unique, wrapped; empty means all dims. Mean is floating only.
  virtual Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims,
                        bool keepdim) = 0;
  // Largest value along dim and its index (first one on ties): (values, int64 indices).
  virtual std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) = 0;

  // ---- matrix products ----
  // a: (M, K), b: (K, N) -> (M, N). Any strides (transposed views go to the GEMM as flags).
  virtual Tensor mm(const Tensor& a, const Tensor& b) = 0;
  // a: (B, M, K), b: (B, K, N) -> (B, M, N).
  virtual Tensor bmm(const Tensor& a, const Tensor& b) = 0;

  // ---- softmax and losses ----
  // Softmax (or log-softmax) along dim.
  virtual Tensor softmax(const Tensor& x, int64_t dim, bool log) = 0;
  // Given y = softmax(x) (or log_softmax), returns dL/dx from dL/dy.
  virtual Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, int64_t dim, bool log) = 0;
  // logp: (N, C), target: (N) int64. Mean over non-ignored rows, sum, or (N) per row.
  virtual Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r,
                          int64_t ignore_index) = 0;
  // grad: 0-d (Mean/Sum) or (N) (None) -> dL/dlogp: (N, C)
  virtual Tensor nll_loss_backward(const Tensor& grad, const Tensor& logp, const Tensor& target,
                                   Reduction r, int64_t ignore_index) = 0;

  // ---- convolution and pooling (NCHW) ----
  // x: (N, C, H, W), w: (K, C/groups, R, S) -> (N, K, P, Q)
  virtual Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) = 0;
  // grad_y: (N, K, P, Q), w: (K, C/groups, R, S) -> (N, C, H, W) = x_shape
  virtual Tensor conv2d_backward_input(const Tensor& grad_y, const Tensor& w, const Shape& x_shape,
                                       const Conv2dParams& p) = 0;
  // grad_y: (N, K, P, Q), x: (N, C, H, W) -> (K, C/groups, R, S) = w_shape
  virtual Tensor conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Shape& w_shape,
                                        const Conv2dParams& p) = 0;
  // x: (N, C, H, W) -> (values (N, C, P, Q), int64 indices into H*W of each plane)
  virtual std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2dParams& p) = 0;
  virtual Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& indices,
                                     const Shape& x_shape) = 0;
  virtual Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) = 0;
  virtual Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape,
                                     const Pool2dParams& p) = 0;

  // ---- normalisation ----
  // x: (N, C, ...) ; weight, bias, running_mean, running_var: (C) or undefined.
  // Training: normalise with batch statistics and update the running stats in place
  // (running = (1 - momentum) * running + momentum * batch, unbiased variance).
  // Eval: normalise with the running stats.
  virtual BatchNormOut batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  bool training, double momentum, double eps) = 0;
  // Training-mode backward (statistics depend on x).
  virtual BatchNormGrads batch_norm_backward(const Tensor& grad_y, const Tensor& x,
                                             const Tensor& weight, const Tensor& save_mean,
                                             const Tensor& save_invstd) = 0;

  // ---- dropout ----
  // mask (x's dtype) = (uniform(seed, offset + i) >= p) / (1 - p); returns (x * mask, mask).
  virtual std::pair<Tensor, Tensor> dropout(const Tensor& x, double p, uint64_t seed,
                                            uint64_t offset) = 0;

  // ---- indexing ----
  // index: 1-d int64. out = x with dim `dim` replaced by x[index].
  virtual Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) = 0;
  // out = zeros(shape); out.index_select(dim, index) += src (repeated indices accumulate).
  virtual Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index,
                           const Tensor& src) = 0;

  // ---- optimizers: one fused update over many tensors ----
  // Note [Fused optimizer steps]
  // An optimizer step touches every parameter; launching several elementwise kernels per
  // parameter costs more than the math on a GPU. These methods update a whole list of tensors
  // at once (on CUDA, in one kernel launch) with exactly the formulas of PyTorch's Adam/AdamW/SGD;
  // the composite version written with tensor ops (nn/optim) is their test oracle.
  // All lists have one entry per parameter, of the parameter's shape; every tensor is
  // contiguous, of one floating dtype (f32 or f64) and on this backend's device. Parameters and
  // states are updated in place.
  // p -= lr * m_hat / (sqrt(v_hat) + eps), with m, v (and max_exp_avg_sqs when amsgrad; empty
  // otherwise) updated first; weight decay added to the gradient (Adam) or decoupled (AdamW).
  virtual void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                         const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& p) = 0;
  // p -= lr * d_p with d_p = g + wd * p, through the momentum buffers when momentum != 0
  // (momentum_bufs empty otherwise).
  virtual void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& momentum_bufs, const SgdStepParams& p) = 0;
};

// The backend of a device: the CPU backend, or the CUDA backend when loom is built with CUDA.
Backend& backend_for(Device d);
bool has_backend(DeviceType t);  // compiled in (a CUDA build may still find no GPU at run time)

}  // namespace loom
