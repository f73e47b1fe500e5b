// The usual training step, built from accumulate and CudaGraphStep (train/step_runner.h).
#include "train/step_runner.h"

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"

namespace loom::train {

StepRunner::StepRunner(distributed::ParallelModel& model, double label_smoothing, bool graph)
    : model_(model.train_module()),
      opt_(model.optimizer()),
      smoothing_(label_smoothing),
      graph_([this](const Tensor& x, const Tensor& y) { return eager_step(x, y); }, graph, opt_,
             &model),
      accum_{.k = 1, .model = &model} {}

StepRunner::StepRunner(nn::Module& model, optim::Optimizer& opt, double label_smoothing, bool graph)
    : local_(std::make_unique<distributed::LocalModel>(model, opt)),
      model_(model),
      opt_(opt),
      smoothing_(label_smoothing),
      graph_([this](const Tensor& x, const Tensor& y) { return eager_step(x, y); }, graph, opt,
             local_.get()),
      accum_{.k = 1, .model = local_.get()} {}

StepRunner::~StepRunner() = default;

void StepRunner::check_not_started(const char* what) const {
  LOOM_CHECK(graph_.calls() == 0, "StepRunner::", what,
             ": the first step has run (and with --cuda-graph the step is captured from the "
             "second on); set it before the first step");
}

void StepRunner::set_amp(std::optional<DType> dtype, amp::GradScaler* scaler) {
  if (graph_.graphed()) check_not_started("set_amp");
  LOOM_CHECK(!(scaler && in_backward_),
             "StepRunner::set_amp: a GradScaler needs every gradient before the first update "
             "(its inf check), which the optimizer inside backward does not wait for");
  amp_dtype_ = dtype;
  scaler_ = scaler;
}

void StepRunner::set_optimizer_in_backward(bool on) {
  if (!on) {
    in_backward_.reset();
    return;
  }
  LOOM_CHECK(!graph_.graphed(),
             "StepRunner: the optimizer inside backward updates one parameter at a "
             "time, which a CUDA graph step (--cuda-graph) cannot capture; use one or the other");
  LOOM_CHECK(!scaler_,
             "StepRunner: a GradScaler (float16) needs every gradient before the first "
             "update (its inf check), which the optimizer inside backward does not wait for");
  LOOM_CHECK(clip_ == 0.0,
             "StepRunner: clipping needs every gradient before the first update, which the "
             "optimizer inside backward does not wait for");
  LOOM_CHECK(accum_.k == 1, "StepRunner: --grad-accum ", accum_.k,
             " adds each micro-batch's gradients into .grad, which the optimizer inside backward "
             "frees as soon as it has applied them; use one or the other");
  if (!in_backward_) in_backward_ = std::make_unique<optim::OptimizerInBackward>(opt_);
}

void StepRunner::set_grad_accum(int64_t k) {
  LOOM_CHECK(k >= 1, "StepRunner::set_grad_accum: --grad-accum ", k,
             " must be at least 1 (micro-batches per step)");
  LOOM_CHECK(k == 1 || !in_backward_, "StepRunner: --grad-accum ", k,
             " adds each micro-batch's gradients into .grad, which the optimizer inside backward "
             "frees as soon as it has applied them; use one or the other");
  if (graph_.graphed()) check_not_started("set_grad_accum");
  accum_.k = k;
  if (graph_.graphed()) graph_.set_forwards(k);  // DDP counts k training forwards per replay
}

void StepRunner::set_grad_clip(double max_norm) {
  LOOM_CHECK(max_norm >= 0.0, "StepRunner::set_grad_clip: max_norm ", max_norm, " is negative");
  LOOM_CHECK(max_norm == 0.0 || !in_backward_,
             "StepRunner: clipping needs every gradient before the first update, which the "
             "optimizer inside backward does not wait for");
  clip_ = max_norm;
}

Tensor StepRunner::step(const Tensor& x, const Tensor& y) { return graph_(x, y); }

// The step, in the order a PyTorch program writes it.
Tensor StepRunner::eager_step(const Tensor& x, const Tensor& y) {
  opt_.zero_grad();
  Tensor loss =
      accumulate(x, y, accum_, [this](const MicroBatch& mb) { return forward_backward(mb); });
  optimizer_step();
  if (accum_.profiler) accum_.profiler->mark(StepProfiler::OptimizerEnd);
  return loss;
}

// The model's own loss where it has one (GPT's head and loss as one op: nn::Module::has_loss),
// else the cross-entropy of its output; under autocast when set; backward from the scaled loss.
Tensor StepRunner::forward_backward(const MicroBatch& mb) {
  Tensor loss;
  {
    amp::Autocast autocast(amp_dtype_);
    loss = smoothing_ == 0.0 && model_.has_loss()
               ? model_.loss(mb.x, mb.y)
               : classification_loss(model_(mb.x), mb.y, Reduction::Mean, smoothing_);
  }
  loss = mb.share(loss);
  mb.forward_done();
  (scaler_ ? scaler_->scale(loss) : loss).backward();
  return loss.detach();
}

void StepRunner::optimizer_step() {
  if (in_backward_) return;  // every parameter was updated as backward produced its gradient
  if (clip_ > 0.0) {
    if (scaler_) scaler_->unscale_(opt_);  // clip the true gradients, not the scaled ones
    // In the update where the optimizer can (Note [Clipping inside the update]); over every
    // rank when sharded.
    grad_norm_ = opt_.clip_grad_norm_in_step(clip_);
  }
  if (!scaler_) {
    opt_.step();
    return;
  }
  scaler_->step(opt_);
  scaler_->update();
}

}  // namespace loom::train
