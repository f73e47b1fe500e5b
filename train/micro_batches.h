// Gradient accumulation as a wrapper around a program's forward-and-backward: accumulate() cuts
// the step's batch into --grad-accum micro-batches and calls the program's function on each, so
// the program's step still reads zero_grad, forward, loss, backward, clip, update. Leaves out:
// the phases themselves (the program writes them) and micro-batches of unequal sizes.
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"
#include "train/step_profile.h"

namespace loom::distributed {
class ParallelModel;
}

namespace loom::train {

// Note [Gradient accumulation]
// accumulate(x, y, {k, ...}, fn) splits each step's batch x: (N, ...), y: (N, ...) along dim 0
// into k equal micro-batches of N/k rows (N % k != 0 is an error naming both) and runs fn on each:
// forward, loss and backward of the micro-batch's mean loss divided by k (MicroBatch::share), so
// the gradients add up in .grad to the gradient of the whole batch's mean loss; then the program
// clips (if it does) and updates once, as PyTorch's recipe does. Peak activation memory is that
// of one micro-batch. accumulate returns the sum of the k shares: the batch's mean loss (with
// ignored targets, -1, each micro-batch's mean is over its own counted targets, as in PyTorch's
// recipe). Under DistributedDataParallel (Accumulation::model's no_sync) the first k - 1 backwards
// run under no_sync(): only the last one all-reduces, and it reduces the sum of all k. With a
// GradScaler the program scales each micro-batch's loss, and unscales, checks, steps and updates
// once. After the last backward the model's finish_gradients() completes what its kind must
// (sequence parallel's sums over tp). k = 1 is the plain step: no slicing, no division. The
// profiler's marks are the last micro-batch's: the earlier micro-batches' forward and backward
// count as forward.

// How a step accumulates: k micro-batches, the model whose no_sync() holds the reduction back
// until the last (null: nothing to hold back), and the --profile timer whose marks it sets.
struct Accumulation {
  int64_t k = 1;
  distributed::ParallelModel* model = nullptr;
  StepProfiler* profiler = nullptr;
};

// One micro-batch of a step: x: (N/k, ...), y: (N/k, ...), the index-th of count.
struct MicroBatch {
  Tensor x, y;
  int64_t index = 0, count = 1;
  StepProfiler* profiler = nullptr;

  bool last() const { return index + 1 == count; }
  // The micro-batch's part of the step's mean loss: loss / count (the loss itself when count is 1).
  Tensor share(const Tensor& loss) const;
  // --profile: the forward (and loss) of the step's last micro-batch ends here (Note [Step
  // phases] in train/step_profile.h); nothing without a profiler.
  void forward_done() const;
};

// fn runs forward, loss and backward of one micro-batch and returns its (detached) share of the
// loss. accumulate returns the step's mean loss, a scalar left on the device.
using ForwardBackward = std::function<Tensor(const MicroBatch&)>;
Tensor accumulate(const Tensor& x, const Tensor& y, const Accumulation& how,
                  const ForwardBackward& fn);

}  // namespace loom::train
