// StepRunner: the usual training step (zero grads, forward, cross-entropy or the model's own
// loss, backward, clip, optimizer update) written once, for the benchmarks and the tests; the
// example programs write the same step out in main (examples/train_mlp.cpp). It is built from the
// same parts: accumulate (train/micro_batches.h) for --grad-accum and CudaGraphStep
// (train/cuda_graph_step.h) for --cuda-graph. Leaves out: micro-batches of unequal sizes.
#pragma once

#include <memory>
#include <optional>

#include "core/tensor.h"
#include "distributed/parallel/parallel_model.h"
#include "nn/amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/in_backward.h"
#include "nn/optim/optimizer.h"
#include "train/classification_loss.h"
#include "train/cuda_graph_step.h"
#include "train/micro_batches.h"
#include "train/step_profile.h"

namespace loom::train {

class StepRunner {
 public:
  // graph = true replays a CUDA graph from the second step on (Note [The training step as a CUDA
  // graph] in train/cuda_graph_step.h). The model as distributed::parallelize spread it (under
  // DDP gradient accumulation reduces on the last micro-batch; the graph captures its
  // all-reduces); it steps model.optimizer().
  StepRunner(distributed::ParallelModel& model, double label_smoothing, bool graph);
  // One process: the model and its optimizer as they are.
  StepRunner(nn::Module& model, optim::Optimizer& opt, double label_smoothing, bool graph);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // One training step on x: (N, ...) and class indices y: (N) (or a sequence model's (N, T)
  // against logits (N, T, C): classification_loss; a model with its own loss, such as GPT,
  // computes it: nn::Module::has_loss); returns the loss (a scalar on the device,
  // not synchronised), the mean over the batch also when it runs as k micro-batches.
  Tensor step(const Tensor& x, const Tensor& y);

  // Gradient accumulation (--grad-accum): each step runs as k micro-batches of N/k rows and one
  // update (Note [Gradient accumulation] in train/micro_batches.h); k = 1 (the default) is one
  // forward and backward. An error for k < 1, with the optimizer inside backward, or after the
  // first step.
  void set_grad_accum(int64_t k);
  int64_t grad_accum() const { return accum_.k; }

  // Mixed precision for the following steps: forward and loss under amp::Autocast(dtype)
  // (float16 or bfloat16; nullopt = off); with a scaler (float16), backward starts from
  // scaler->scale(loss) and the update is scaler->step(opt) then scaler->update(). Set it before
  // the first step.
  void set_amp(std::optional<DType> dtype, amp::GradScaler* scaler);

  // Applies the optimizer inside backward, each parameter as soon as its gradient is complete,
  // and frees that gradient (nn/optim/in_backward.h): lower peak memory, the same updates. Eager
  // steps only, not with a GradScaler, not with gradient accumulation (errors here or at the
  // first step).
  void set_optimizer_in_backward(bool on);

  // Clips the gradients to a global 2-norm of at most max_norm before each update (after
  // unscaling them with a GradScaler), as torch.nn.utils.clip_grad_norm_; 0 turns it off. The
  // norm before clipping is grad_norm() (a device scalar; undefined before the first step).
  // Adam and AdamW apply the clip inside their update (Note [Clipping inside the update] in
  // nn/optim/optimizer.h): the parameters are those of a clip before the update, but .grad is
  // left unclipped.
  void set_grad_clip(double max_norm);
  const Tensor& grad_norm() const { return grad_norm_; }

  // Eager steps mark ForwardEnd, BackwardComputed (unless DDP already did), BackwardEnd and
  // OptimizerEnd on `p` (Note [Step phases]); null turns it off. The graph step is one replay.
  void set_profiler(StepProfiler* p) { accum_.profiler = p; }

 private:
  Tensor eager_step(const Tensor& x, const Tensor& y);
  Tensor forward_backward(const MicroBatch& mb);
  void optimizer_step();  // clip, then the update through the scaler when there is one
  void check_not_started(const char* what) const;

  std::unique_ptr<distributed::LocalModel> local_;  // the one-process constructor's
  nn::Module& model_;                               // what trains: the model, or its DDP wrapper
  optim::Optimizer& opt_;
  double smoothing_;
  CudaGraphStep graph_;
  Accumulation accum_;
  std::optional<DType> amp_dtype_;
  amp::GradScaler* scaler_ = nullptr;
  std::unique_ptr<optim::OptimizerInBackward> in_backward_;
  double clip_ = 0.0;
  Tensor grad_norm_;
};

}  // namespace loom::train
