// The neural-network ops: softmax family, losses, convolution, pooling, normalisation, dropout.
// Leaves out: the Modules that hold parameters for them (nn/).
#pragma once

#include "core/tensor.h"
#include "kernels/backend.h"

namespace loom {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// logp: (N, C) log-probabilities, target: (N) int64 classes.
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r = Reduction::Mean,
                int64_t ignore_index = -100);
// logits: (N, C), target: (N) int64. label_smoothing in [0, 1) mixes in the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction r = Reduction::Mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r = Reduction::Mean);

// x: (N, C, H, W), weight: (K, C/groups, R, S), bias: (K) or undefined -> (N, K, P, Q)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& p = {});
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
// (N, C, H, W) -> (N, C, out_h, out_w) with PyTorch's adaptive windows.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size);

// x: (N, C, ...). In training, running_mean/var (if defined) are updated in place.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims of `normalized_shape`; weight/bias of that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Inverted dropout: in training, zero each element with probability p and scale the rest by
// 1 / (1 - p); the draw comes from the default generator's Philox stream.
Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace loom
