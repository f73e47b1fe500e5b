// OptimizerInBackward: applies an optimizer to each parameter as soon as backward has finished
// that parameter's gradient, then frees the gradient. The gradients of the whole model then never
// exist at once, so a step's peak memory drops by up to their size (Note [Optimizer in
// backward]). The updates are the ones step() would make, parameter by parameter.
// Leaves out: everything that needs all gradients before the first update (clipping by the global
// norm, a GradScaler's inf check for float16, accumulation over micro-batches, DDP's all-reduce),
// and a capturable optimizer (a CUDA graph step counts one step per group and step()).
#pragma once

#include <memory>

#include "nn/optim/optimizer.h"

namespace loom::optim {

// Note [Optimizer in backward]
// Every parameter of the optimizer gets a post-accumulate hook (autograd/engine.h). The engine
// runs a leaf's hooks once per backward pass, after every gradient that reaches the leaf has been
// summed into .grad, so by then each node that saved the parameter for backward has run, and
// updating it in place changes nothing still to be computed. The hook calls step_one(p), which
// is step() restricted to p (same rule, same per-parameter step count), and sets p's gradient to
// undefined, returning its memory to the allocator for the next layer's gradients. After
// backward every updated parameter has no gradient; step() would then do nothing, and the
// training loop simply leaves it out. On the wide workload (8 layers of 4096 x 4096, 483 MB of
// float32 gradients) this removed the gradients from the step's peak: docs/perf.md has the
// numbers. A parameter that receives no gradient in a pass is not updated, as with step().
class OptimizerInBackward {
 public:
  // Registers the hooks. One OptimizerInBackward per optimizer at a time (a second would update
  // every parameter twice): an error names the optimizer.
  explicit OptimizerInBackward(Optimizer& opt);
  // The hooks stay on the parameters but do nothing from here on.
  ~OptimizerInBackward();
  OptimizerInBackward(const OptimizerInBackward&) = delete;
  OptimizerInBackward& operator=(const OptimizerInBackward&) = delete;

  // How many parameter updates the hooks have made.
  int64_t updates() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace loom::optim
