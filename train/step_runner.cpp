// The training step, eager or as a replayed CUDA graph (train/step_runner.h). The only file of
// train/ that knows whether loom was built with CUDA.
#include "train/step_runner.h"

#include <utility>
#include <vector>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "distributed/ddp/ddp.h"
#include "nn/clip.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#endif

namespace loom::train {

struct StepRunner::Graph {
#ifdef LOOM_WITH_CUDA
  cuda::CudaGraph graph;
#endif
  Tensor static_x, static_y, static_loss;
};

StepRunner::StepRunner(nn::Module& model, optim::Optimizer& opt, double label_smoothing, bool graph)
    : graph_(std::make_unique<Graph>()),
      model_(model),
      ddp_(dynamic_cast<distributed::DistributedDataParallel*>(&model)),
      opt_(opt),
      smoothing_(label_smoothing),
      use_graph_(graph) {}

StepRunner::~StepRunner() = default;

void StepRunner::set_amp(std::optional<DType> dtype, amp::GradScaler* scaler) {
  LOOM_CHECK(!graph_->static_loss.defined(),
             "StepRunner::set_amp: the CUDA graph is already captured; set mixed precision "
             "before the first step");
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
  LOOM_CHECK(!use_graph_,
             "StepRunner: the optimizer inside backward updates one parameter at a "
             "time, which a CUDA graph step (--cuda-graph) cannot capture; use one or the other");
  LOOM_CHECK(!scaler_,
             "StepRunner: a GradScaler (float16) needs every gradient before the first "
             "update (its inf check), which the optimizer inside backward does not wait for");
  LOOM_CHECK(clip_ == 0.0,
             "StepRunner: clipping needs every gradient before the first update, which the "
             "optimizer inside backward does not wait for");
  LOOM_CHECK(accum_ == 1, "StepRunner: --grad-accum ", accum_,
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
  LOOM_CHECK(!graph_->static_loss.defined(),
             "StepRunner::set_grad_accum: the CUDA graph is already captured; set --grad-accum "
             "before the first step");
  accum_ = k;
}

Tensor classification_loss(const Tensor& logits, const Tensor& target, Reduction r,
                           double label_smoothing) {
  if (logits.dim() <= 2) return cross_entropy(logits, target, r, label_smoothing, -1);
  LOOM_CHECK(target.dim() == logits.dim() - 1, "classification_loss: logits ", describe(logits),
             " and targets ", describe(target), " should be (N, ..., C) and (N, ...)");
  return cross_entropy(flatten(logits, 0, -2), flatten(target), r, label_smoothing, -1);
}

// The model's own loss where it has one (GPT's head and loss as one op: nn::Module::has_loss),
// else the cross-entropy of its output.
Tensor StepRunner::forward_loss(const Tensor& x, const Tensor& y) {
  amp::Autocast autocast(amp_dtype_);
  if (smoothing_ == 0.0 && model_.has_loss()) return model_.loss(x, y);
  return classification_loss(model_(x), y, Reduction::Mean, smoothing_);
}

void StepRunner::backward(const Tensor& loss) {
  if (scaler_)
    scaler_->scale(loss).backward();
  else
    loss.backward();
}

void StepRunner::set_grad_clip(double max_norm) {
  LOOM_CHECK(max_norm >= 0.0, "StepRunner::set_grad_clip: max_norm ", max_norm, " is negative");
  LOOM_CHECK(max_norm == 0.0 || !in_backward_,
             "StepRunner: clipping needs every gradient before the first update, which the "
             "optimizer inside backward does not wait for");
  clip_ = max_norm;
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

Tensor StepRunner::step(const Tensor& x, const Tensor& y) {
  return use_graph_ ? graph_step(x, y) : eager_step(x, y);
}

Tensor StepRunner::eager_step(const Tensor& x, const Tensor& y) {
  opt_.zero_grad();
  Tensor loss = accumulate(x, y);
  optimizer_step();
  if (profiler_) profiler_->mark(StepProfiler::OptimizerEnd);
  return loss;
}

Tensor StepRunner::graph_step(const Tensor& x, const Tensor& y) {
  // Before anything runs: a group whose all-reduces cannot be captured (Gloo) is refused by name.
  if (ddp_ && !graph_->static_loss.defined()) ddp_->reducer().check_capturable("--cuda-graph");
#ifdef LOOM_WITH_CUDA
  LOOM_CHECK(x.device().is_cuda(), "--cuda-graph: the step's inputs are on ", x.device(),
             "; a CUDA graph needs a CUDA device");
  if (!graph_->graph.ready()) capture(x, y);
  {
    NoGradGuard g;
    graph_->static_x.copy_(x);
    graph_->static_y.copy_(y);
  }
  if (ddp_) ddp_->before_replay(accum_);  // the consistency check, outside the graph
  graph_->graph.replay();  // the whole step, optimizer included (Note in step_runner.h)
  if (ddp_) ddp_->process_group().watch_graph_replay();  // the collective timeout holds
  return graph_->static_loss;
#else
  (void)x;
  (void)y;
  LOOM_FAIL("--cuda-graph: this build of loom has no CUDA support");
#endif
}

// Note [Gradient accumulation] in train/step_runner.h. k = 1 is the plain step: no slicing, no
// scaling of the loss.
Tensor StepRunner::accumulate(const Tensor& x, const Tensor& y) {
  if (accum_ == 1) return forward_backward(x, y, true);
  const int64_t n = x.dim() > 0 ? x.size(0) : 0;
  LOOM_CHECK(n % accum_ == 0 && y.dim() > 0 && y.size(0) == n, "StepRunner: --grad-accum ", accum_,
             " splits the batch into equal micro-batches, but the batch has ", n, " examples (x ",
             describe(x), ", y ", describe(y), "), not a multiple of ", accum_);
  const int64_t m = n / accum_;
  Tensor total;
  for (int64_t i = 0; i < accum_; ++i) {
    const bool last = i + 1 == accum_;
    std::optional<distributed::DistributedDataParallel::NoSync> no_sync;
    if (ddp_ && !last) no_sync.emplace(*ddp_);  // only the last backward all-reduces
    Tensor loss =
        forward_backward(x.slice(0, i * m, (i + 1) * m), y.slice(0, i * m, (i + 1) * m), last);
    total = total.defined() ? total + loss : loss;
  }
  return total;
}

Tensor StepRunner::forward_backward(const Tensor& x, const Tensor& y, bool last) {
  Tensor loss = forward_loss(x, y);
  if (accum_ > 1) loss = loss / double(accum_);
  const bool mark = profiler_ && last && !use_graph_;
  if (mark) profiler_->mark(StepProfiler::ForwardEnd);
  backward(loss);
  if (mark && !profiler_->marked(StepProfiler::BackwardComputed))
    profiler_->mark(StepProfiler::BackwardComputed);  // unless DDP's reducer already did
  if (mark) profiler_->mark(StepProfiler::BackwardEnd);
  return loss.detach();
}

void StepRunner::capture(const Tensor& x, const Tensor& y) {
#ifdef LOOM_WITH_CUDA
  Graph& g = *graph_;
  g.static_x = x.clone().detach();
  g.static_y = y.clone().detach();
  // Warm-up pass (see the Note), with the buffers it changes restored afterwards.
  std::vector<std::pair<Tensor, Tensor>> saved;
  for (auto& [name, b] : model_.named_buffers()) saved.push_back({b, b.clone()});
  opt_.zero_grad();
  accumulate(g.static_x, g.static_y);
  {
    NoGradGuard ng;
    for (auto& [b, copy] : saved) b.copy_(copy);
  }
  if (ddp_) ddp_->prepare_for_capture();  // the buckets' rebuild now, not in the graph
  opt_.make_capturable();                 // creates the optimizer's state outside the graph
  opt_.zero_grad();                       // the captured backward assigns fresh gradients
  g.graph.capture_begin();
  g.static_loss = accumulate(g.static_x, g.static_y);  // all k micro-batches (views)
  optimizer_step();
  g.graph.capture_end();
#else
  (void)x;
  (void)y;
#endif
}

}  // namespace loom::train
