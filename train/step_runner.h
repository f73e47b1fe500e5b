// StepRunner: one training step (zero grads, forward, cross-entropy, backward, optimizer
// update), run eagerly or as a replayed CUDA graph. Used by the example programs and bench_train.
// Leaves out: mixed precision and gradient accumulation.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "train/step_profile.h"

namespace loom::train {

// Note [The training step as a CUDA graph]
// With --cuda-graph, zero-grad + forward + loss + backward are captured once into a CUDA graph on
// static input buffers and replayed for every batch (one launch instead of hundreds). The
// optimizer's fused update (one launch) runs after each replay, outside the graph, because its
// step count and learning rate change every step. Before capturing, one forward and backward run
// eagerly so that cuBLASLt plans, cuDNN algorithms and workspaces exist (capture cannot create
// them); the BatchNorm running statistics it touched are restored, so the run computes exactly
// what the eager run does. Gradients live in the graph's memory pool and are rewritten by each
// replay, so zero_grad is part of the captured step, not called between replays.
class StepRunner {
 public:
  // graph = true replays a CUDA graph (an error at the first step in a build without CUDA, or
  // when the inputs are not on a CUDA device).
  StepRunner(nn::Module& model, optim::Optimizer& opt, double label_smoothing, bool graph);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // One training step on x: (N, ...) and class indices y: (N); returns the loss (a scalar on the
  // device, not synchronised).
  Tensor step(const Tensor& x, const Tensor& y);

  // Eager steps mark ForwardEnd, BackwardComputed (unless DDP already did), BackwardEnd and
  // OptimizerEnd on `p` (Note [Step phases]); null turns it off. The graph step is one replay.
  void set_profiler(StepProfiler* p) { profiler_ = p; }

 private:
  Tensor forward_backward(const Tensor& x, const Tensor& y);
  void capture(const Tensor& x, const Tensor& y);

  struct Graph;  // the captured step and its static buffers (CUDA builds only)
  std::unique_ptr<Graph> graph_;
  nn::Module& model_;
  optim::Optimizer& opt_;
  double smoothing_;
  bool use_graph_;
  StepProfiler* profiler_ = nullptr;
};

}  // namespace loom::train
