// record() and save(): how an op joins the autograd graph. An op computes its output with the
// kernels, then calls record() with its inputs and a backward lambda; record() does nothing when
// grad mode is off or no input requires grad. Tensors the backward needs are captured through
// save(), which keeps a detached alias and the version it had, and get() raises a clear error if
// the tensor was modified in place in between. A tensor that can be made again from what other
// Saved keep is kept as its recipe instead (Note [Recomputed activations], autograd/recompute.h).
// Leaves out: the engine that runs the backward functions (autograd/engine.h).
#pragma once

#include <initializer_list>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace loom::autograd {
struct RecomputeUse;
}

namespace loom::autograd {

// A tensor saved for backward.
class Saved {
 public:
  Saved() = default;
  Saved(const Tensor& t, const char* op);
  // The saved tensor; throws if it was modified in place after it was saved. A recomputed one is
  // rebuilt at the first call.
  const Tensor& get() const;
  bool defined() const { return t_.defined() || recompute_; }
  // Whether it is kept as a recipe (Note [Recomputed activations]).
  bool recomputed() const { return recompute_ != nullptr; }

 private:
  Tensor t_;
  std::shared_ptr<RecomputeUse> recompute_;  // instead of t_
  uint64_t version_ = 0;
  const char* op_ = "";
};

// True when grad mode is on and any of `inputs` requires grad.
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Inside a backward function: whether input i of the running node needs a gradient. Expensive
// backward functions (mm, conv2d) skip the products nobody will use.
bool needs_input_grad(size_t i);

// Inside a backward function: true when the engine frees the running node's saved tensors as soon
// as it returns (a backward without retain_graph). A backward may then write its gradient over a
// saved tensor that nothing else holds (cross_entropy's logits: Note [Fused cross-entropy]).
bool saved_tensors_freed_after();

// Note [Taking the pending gradient]
// Inside a backward function: the sum of the gradients that nodes run earlier in this pass have
// sent to input i (a tensor used twice, like the residual stream that a layer norm reads and the
// next residual add reads too), if there is one, it is `dtype` and contiguous; else undefined. The
// caller then owns it: its gradient for input i must include it (added in the kernel that writes
// that gradient, one pass instead of the engine's separate add), and the engine stores that
// gradient in place of the sum instead of adding the two. A backward that returns no gradient
// for input i gets the taken sum put back.
Tensor take_pending_grad(size_t i, DType dtype);

// Attaches a node for `op` to `out`, with one edge per input. Returns `out`.
Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward);

}  // namespace loom::autograd

namespace loom {
// Shorthand used throughout autograd/ops.
inline autograd::Saved save(const Tensor& t, const char* op) { return autograd::Saved(t, op); }
using autograd::Grads;
using autograd::needs_input_grad;
using autograd::record;
using autograd::saved_tensors_freed_after;
}  // namespace loom
