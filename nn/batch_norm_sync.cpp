// BatchNorm2d's synchronised training path (SyncBatchNorm): the per-channel statistics of every
// process's batch together, so that N processes with B/N images each normalise exactly as one
// process with B images. Composed from loom's differentiable ops and a CrossProcessSum; autograd
// derives the backward. Leaves out: eval (the ordinary path, with the running stats), the fused
// kernels (this path runs a few more passes over x), and groups smaller than the whole job.
//
// Note [SyncBatchNorm]
// For channel c over every process r's x_r: (N_r, C, H, W),
//   n    = sum_r N_r H W                                   (counts may differ: a last short batch)
//   mean = sum_r sum x_r / n
//   var  = sum_r sum (x_r - mean)^2 / n                    (biased, as in training BatchNorm)
//   y    = (x - mean) / sqrt(var + eps) * weight + bias
// Two sums over the processes in forward: [sum x, count] packed in one (C + 1) tensor, then the
// centred squares, so that no E[x^2] - mean^2 cancellation enters. Backward: each CrossProcessSum's
// gradient is the same sum of its output gradients, so the gradient of mean and var reaches every
// process's x, as one process holding all of x would compute it. With DDP averaging the weight
// gradients over N processes (each loss a mean over its B/N images), the result equals one
// process's B-image step up to rounding (tests/examples/test_train_cnn_models.cpp: ResNet-18's
// gradients on 2 Gloo processes against one; tests/nn/test_batch_norm_sync.cpp: the forward).
// The running stats get mean and the unbiased var * n / (n - 1), as BatchNorm2d's do. PyTorch's
// SyncBatchNorm instead gathers each process's (mean, invstd, count) and merges them; it needs one
// collective less, this is easier to read.
#include "autograd/grad_mode.h"
#include "autograd/ops/conv_pool.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "nn/layers.h"

namespace loom::nn {

Tensor BatchNorm2d::forward_synced(const Tensor& x, bool relu_after, bool max_pool2,
                                   double factor) {
  const int64_t C = num_features;
  const Shape per_channel{1, C, 1, 1};
  const CrossProcessSum& all = *sync;
  const bool low = x.dtype() == DType::BF16 || x.dtype() == DType::F16;  // autocast's inputs
  const Tensor xf = low ? loom::to(x, DType::F32) : x;  // (N, C, H, W), statistics in f32 or f64
  const double local_n = double(x.size(0) * x.size(2) * x.size(3));
  // (C + 1): every process's per-channel sums, then the total count.
  const Tensor sums = all(
      cat({sum(xf, {0, 2, 3}), full({1}, local_n, {.dtype = xf.dtype(), .device = x.device()})}));
  const Tensor n = slice(sums, 0, C, C + 1).detach();                // (1)
  const Tensor mean = slice(sums, 0, 0, C) / n;                      // (C)
  const Tensor centred = xf - view(mean, per_channel);               // (N, C, H, W)
  const Tensor var = all(sum(square(centred), {0, 2, 3})) / n;       // (C)
  Tensor y = centred * view(rsqrt(var + options.eps), per_channel);  // (N, C, H, W)
  if (options.affine) y = y * view(weight, per_channel) + view(bias, per_channel);
  if (options.track_running_stats) {
    NoGradGuard g;
    running_mean.copy_(running_mean * (1.0 - factor) + mean.detach() * factor);
    running_var.copy_(running_var * (1.0 - factor) + var.detach() * (n / (n - 1.0)) * factor);
  }
  if (relu_after) y = relu(y);
  if (max_pool2) y = max_pool2d(y, Pool2dParams{});  // 2 x 2, stride 2
  return y.dtype() == x.dtype() ? y : loom::to(y, x.dtype());
}

}  // namespace loom::nn
