// The loss of a classifier's step and evaluation: cross-entropy of logits against class indices,
// also for a sequence of classifications (a language model's next tokens). Leaves out: a model's
// own fused loss (nn::Module::loss, GPT's head and loss as one op).
#pragma once

#include "autograd/ops/ops.h"

namespace loom::train {

// cross_entropy of logits (N, C) against class indices (N), or of logits (N, ..., C) against
// (N, ...) as that many classifications: a language model's (B, T, V) logits against its (B, T)
// next tokens. Targets equal to -1 are ignored (padding), as nanoGPT and llm.c mark them.
Tensor classification_loss(const Tensor& logits, const Tensor& target, Reduction r,
                           double label_smoothing = 0.0);

}  // namespace loom::train
