// classification_loss: see train/classification_loss.h.
#include "train/classification_loss.h"

namespace loom::train {

Tensor classification_loss(const Tensor& logits, const Tensor& target, Reduction r,
                           double label_smoothing) {
  if (logits.dim() <= 2) return cross_entropy(logits, target, r, label_smoothing, -1);
  LOOM_CHECK(target.dim() == logits.dim() - 1, "classification_loss: logits ", describe(logits),
             " and targets ", describe(target), " should be (N, ..., C) and (N, ...)");
  return cross_entropy(flatten(logits, 0, -2), flatten(target), r, label_smoothing, -1);
}

}  // namespace loom::train
