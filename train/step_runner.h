// StepRunner: one training step (zero grads, forward, cross-entropy, backward, optimizer
// update), run eagerly or as a replayed CUDA graph. Used by the example programs and bench_train.
// Leaves out: mixed precision and gradient accumulation.
#pragma once

#include "autograd/ops/ops.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#endif

namespace loom::examples {

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
  StepRunner(nn::Module& model, optim::Optimizer& opt, double label_smoothing, bool graph)
      : model_(model), opt_(opt), smoothing_(label_smoothing), use_graph_(graph) {}

  // One training step on (x, y); returns the loss (on the device, not synchronised).
  Tensor step(const Tensor& x, const Tensor& y) {
    if (!use_graph_) {
      opt_.zero_grad();
      Tensor loss = forward_backward(x, y);
      opt_.step();
      return loss;
    }
#ifdef LOOM_WITH_CUDA
    LOOM_CHECK(x.device().is_cuda(), "--cuda-graph: the step's inputs are on ", x.device(),
               "; a CUDA graph needs a CUDA device");
    if (!graph_.ready()) capture(x, y);
    {
      NoGradGuard g;
      static_x_.copy_(x);
      static_y_.copy_(y);
    }
    graph_.replay();
    opt_.step();
    return static_loss_;
#else
    LOOM_FAIL("--cuda-graph: this build of loom has no CUDA support");
#endif
  }

 private:
  Tensor forward_backward(const Tensor& x, const Tensor& y) {
    Tensor loss = cross_entropy(model_(x), y, Reduction::Mean, smoothing_);
    loss.backward();
    return loss.detach();
  }

#ifdef LOOM_WITH_CUDA
  void capture(const Tensor& x, const Tensor& y) {
    static_x_ = x.clone().detach();
    static_y_ = y.clone().detach();
    // Warm-up pass (see the Note), with the buffers it changes restored afterwards.
    std::vector<std::pair<Tensor, Tensor>> saved;
    for (auto& [name, b] : model_.named_buffers()) saved.push_back({b, b.clone()});
    opt_.zero_grad();
    forward_backward(static_x_, static_y_);
    {
      NoGradGuard g;
      for (auto& [b, copy] : saved) b.copy_(copy);
    }
    opt_.zero_grad();  // the captured backward assigns fresh gradients
    graph_.capture_begin();
    static_loss_ = forward_backward(static_x_, static_y_);
    graph_.capture_end();
  }

  cuda::CudaGraph graph_;
  Tensor static_x_, static_y_, static_loss_;
#endif
  nn::Module& model_;
  optim::Optimizer& opt_;
  double smoothing_;
  bool use_graph_;
};

}  // namespace loom::examples
