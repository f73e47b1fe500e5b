// StepRunner: one training step (zero grads, forward, cross-entropy, backward, optimizer
// update), run eagerly or as a replayed CUDA graph, optionally over k accumulated micro-batches.
// Used by the example programs and bench_train. Leaves out: micro-batches of unequal sizes.
#pragma once

#include <memory>
#include <optional>

#include "core/tensor.h"
#include "nn/amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/in_backward.h"
#include "nn/optim/optimizer.h"
#include "train/step_profile.h"

namespace loom::distributed {
class DistributedDataParallel;
}

namespace loom::train {

// cross_entropy of logits (N, C) against class indices (N), or of logits (N, ..., C) against
// (N, ...) as that many classifications: a language model's (B, T, V) logits against its (B, T)
// next tokens. Targets equal to -1 are ignored (padding), as nanoGPT and llm.c mark them.
Tensor classification_loss(const Tensor& logits, const Tensor& target, Reduction r,
                           double label_smoothing = 0.0);

// Note [The training step as a CUDA graph]
// With --cuda-graph the whole step (zero-grad, forward, loss, backward and the optimizer update,
// with a GradScaler also unscale, the inf check and the scale schedule) is captured once into a
// CUDA graph on static input buffers and replayed for every batch: one launch instead of
// hundreds, and no host synchronisation. Before capturing, one forward and backward run eagerly
// so that cuBLASLt plans, cuDNN algorithms and workspaces exist (capture cannot create them);
// the BatchNorm running statistics it touched are restored, so the run computes exactly what the
// eager run does. Then the optimizer is made capturable (Note [Capturable optimizer] in
// nn/optim/optimizer.h): its learning rate and step count move to the device, where the fused
// kernels read and count them, and its state is created, so a replay updates correctly at every
// step and a learning-rate schedule still applies. Gradients live in the graph's memory pool and
// are rewritten by each replay, so zero_grad is part of the captured step, not called between
// replays. With mixed precision (set_amp) the captured forward runs under autocast and the
// backward starts from the scaled loss (its scale is read from the scaler's device tensor); the
// scaler's skip decision stays on the device (Note [GradScaler]). With gradient accumulation
// (set_grad_accum) the graph holds all k micro-batches: the static buffers are the whole batch
// and the micro-batches are views of them (Note [Gradient accumulation]).
// Under DistributedDataParallel over NCCL the graph also holds DDP's forward (rank 0's buffers)
// and the backward's bucket all-reduces, captured in bucket order, the same on every rank (Note
// [DDP and CUDA graphs] in distributed/ddp/ddp.cpp, Note [Reducer under graph capture]). The
// warm-up pass is then also DDP's first iteration, which records the order gradients arrive in;
// the buckets are rebuilt in that order before the capture (prepare_for_capture), and every
// .grad is a view of its bucket, zero-filled by the captured forward. Outside the graph: the
// consistency check (before a replay when one is due) and the loss read-back (the caller's);
// after each replay the process group watches it as one op (the collective timeout). Gloo is
// refused at the first step, with the reason (its collectives run on host threads), and so are
// find_unused_parameters and ZeRO.
//
// Note [Gradient accumulation]
// set_grad_accum(k) splits each step's batch x: (N, ...), y: (N, ...) along dim 0 into k equal
// micro-batches of N/k rows (N % k != 0 is an error naming both). Each runs forward, loss and
// backward with its mean loss divided by k, so the gradients add up in .grad to the gradient of
// the whole batch's mean loss; then clipping (if set) and one optimizer update, as PyTorch's
// recipe does. Peak activation memory is that of one micro-batch. step() returns the sum of the
// k scaled losses: the batch's mean loss (with ignored targets, -1, each micro-batch's mean is
// over its own counted targets, as in PyTorch's recipe). Under DistributedDataParallel (the model
// given to the constructor is one) the first k - 1 backwards run under no_sync(): only the last
// one all-reduces, and it reduces the sum of all k. With a GradScaler each micro-batch's loss is
// scaled, and unscale, the inf check, step and update happen once. The profiler's marks are the
// last micro-batch's: the earlier micro-batches' forward and backward count as forward. The
// optimizer inside backward frees each gradient as it completes, so it cannot accumulate: an
// error.
class StepRunner {
 public:
  // graph = true replays a CUDA graph (an error at the first step in a build without CUDA, when
  // the inputs are not on a CUDA device, or when the optimizer cannot be made capturable).
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
  // update (Note [Gradient accumulation]); k = 1 (the default) is one forward and backward. An
  // error for k < 1, with the optimizer inside backward, or after the CUDA graph was captured.
  void set_grad_accum(int64_t k);
  int64_t grad_accum() const { return accum_; }

  // Mixed precision for the following steps: forward and loss under amp::Autocast(dtype)
  // (float16 or bfloat16; nullopt = off); with a scaler (float16), backward starts from
  // scaler->scale(loss) and the update is scaler->step(opt) then scaler->update(). Set it before
  // the first step when the step is a CUDA graph.
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
  void set_profiler(StepProfiler* p) { profiler_ = p; }

 private:
  Tensor eager_step(const Tensor& x, const Tensor& y);
  Tensor graph_step(const Tensor& x, const Tensor& y);
  // Forward, loss and backward of all k micro-batches; returns the batch's mean loss (detached).
  Tensor accumulate(const Tensor& x, const Tensor& y);
  // One micro-batch: its loss / k (detached); `last` marks the profiler and lets DDP reduce.
  Tensor forward_backward(const Tensor& x, const Tensor& y, bool last);
  Tensor forward_loss(const Tensor& x, const Tensor& y);  // under autocast when set
  void backward(const Tensor& loss);                      // from the scaled loss with a scaler
  void optimizer_step();                                  // through the scaler when there is one
  void capture(const Tensor& x, const Tensor& y);

  struct Graph;  // the captured step and its static buffers (CUDA builds only)
  std::unique_ptr<Graph> graph_;
  nn::Module& model_;
  distributed::DistributedDataParallel* ddp_;  // model_ when it is one (no_sync), else null
  optim::Optimizer& opt_;
  double smoothing_;
  bool use_graph_;
  StepProfiler* profiler_ = nullptr;
  std::optional<DType> amp_dtype_;
  amp::GradScaler* scaler_ = nullptr;
  std::unique_ptr<optim::OptimizerInBackward> in_backward_;
  double clip_ = 0.0;
  int64_t accum_ = 1;
  Tensor grad_norm_;
};

}  // namespace loom::train
