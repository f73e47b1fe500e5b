// The softmax family and the losses: softmax, log_softmax, nll_loss, cross_entropy, mse_loss
// (autograd/ops/softmax_loss.cpp).
// Leaves out: the loss Modules (nn/loss.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/params.h"

namespace loom {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// logp: (N, C) log-probabilities, target: (N) int64 classes.
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r = Reduction::Mean,
                int64_t ignore_index = -100);
// logits: (N, C), target: (N) int64. label_smoothing in [0, 1) mixes in the uniform distribution.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction r = Reduction::Mean,
                     double label_smoothing = 0.0, int64_t ignore_index = -100);
// cross_entropy runs with its fused kernels for 1024 classes or more (a language model's
// vocabulary) and as log_softmax + nll_loss below that, unless set_fused_cross_entropy(true) fuses
// every size (Note [Fused cross-entropy] in autograd/ops/softmax_loss.cpp).
void set_fused_cross_entropy(bool on);
bool fused_cross_entropy();
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction r = Reduction::Mean);

}  // namespace loom
