// GPipe and 1F1B (distributed/pipeline/schedule.h, Note [Pipeline schedules]): the micro-batches'
// forwards and backwards on one stage with the sends and receives between stages, the tied head's
// gradients summed, the loss broadcast, evaluation's forward-only pass, and the clip over every
// stage.
#include "distributed/pipeline/schedule.h"

#include <vector>

#include "autograd/amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"

namespace loom::distributed {

namespace {

// One stage's step: what each micro-batch keeps between its forward and its backward.
class StageStep {
 public:
  StageStep(PipelineStage& st, const Tensor& x, const Tensor& y, ProcessGroup& pp, int M,
            std::optional<DType> autocast, amp::GradScaler* scaler)
      : st_(st),
        x_(x),
        y_(y),
        pp_(pp),
        M_(M),
        autocast_(autocast),
        scaler_(scaler),
        kept_(size_t(M)) {
    const Tensor& rows = x.defined() ? x : y;  // the shapes, on a middle stage too
    LOOM_CHECK(rows.defined() && rows.dim() == 2 && rows.size(0) % M == 0, "pipeline: ", M,
               " micro-batches do not divide the batch ",
               rows.defined() ? describe(rows) : std::string("(undefined)"));
    b_ = rows.size(0) / M, T_ = rows.size(1);
  }

  void forward(int m) {
    Kept& k = kept_[size_t(m)];
    if (st_.is_first()) {
      k.in = slice(x_, 0, m * b_, (m + 1) * b_);
    } else {
      k.in = activation();
      pp_.recv(k.in, st_.stage() - 1, 2 * m)->wait();
      k.in.requires_grad_(true);
    }
    amp::Autocast scope(autocast_);
    k.out = st_.forward(k.in);
    if (st_.is_last()) {
      k.out = st_.loss(k.out, slice(y_, 0, m * b_, (m + 1) * b_)) / double(M_);
      loss_ = loss_.defined() ? loss_ + k.out.detach() : k.out.detach();
    } else {  // in the activations' dtype (the residual stream's: float32 under autocast too)
      send(to(k.out.detach(), activation_dtype()), st_.stage() + 1, 2 * m);
    }
  }

  void backward(int m) {
    Kept& k = kept_[size_t(m)];
    if (st_.is_last()) {
      (scaler_ ? scaler_->scale(k.out) : k.out).backward();  // fp16: the loss scaled
    } else {
      Tensor grad = activation();
      pp_.recv(grad, st_.stage() + 1, 2 * m + 1)->wait();
      k.out.backward(to(grad, k.out.dtype()));
    }
    if (!st_.is_first()) send(k.in.grad(), st_.stage() - 1, 2 * m + 1);
    k = Kept{};  // this micro-batch's activations go
  }

  // Waits for the sends, sums a tied head's gradients (over pp) and the sequence-parallel norms'
  // (over tp), and broadcasts the loss from the last stage.
  Tensor finish() {
    for (auto& w : sends_) w->wait();
    sends_.clear(), sent_.clear();
    // A frozen tied matrix (LoRA's base) has no gradient; every stage sees the same flag.
    if (st_.ties_head() && st_.head_weight().requires_grad()) sum_tied_gradient();
    st_.sync_sequence_parallel_grads();  // the norms' partial gradients, summed over tp
    Tensor loss =
        loss_.defined()
            ? contiguous(loss_)
            : zeros({}, {.dtype = st_.head_weight().dtype(), .device = st_.head_weight().device()});
    pp_.broadcast(loss, st_.stages() - 1)->wait();
    return loss;
  }

 private:
  struct Kept {
    Tensor in, out;
  };

  DType activation_dtype() const { return st_.head_weight().dtype(); }
  Tensor activation() const {
    const Tensor& w = st_.head_weight();
    return empty({b_, st_.boundary_length(T_), st_.hidden_size()},
                 {.dtype = w.dtype(), .device = w.device()});
  }

  void send(const Tensor& t, int dst, int tag) {
    sent_.push_back(contiguous(t));  // alive until its send completes
    sends_.push_back(pp_.send(sent_.back(), dst, tag));
  }

  // The first and the last stage each hold a gradient of the tied matrix; the middle ones add 0.
  void sum_tied_gradient() {
    autograd::NoGradGuard no_grad;
    const Tensor& w = st_.head_weight();
    const bool holds = st_.is_first() || st_.is_last();
    Tensor g = holds && w.grad().defined() ? contiguous(w.grad()) : zeros_like(w);
    pp_.all_reduce(g, ReduceOp::Sum)->wait();
    if (holds) w.grad().copy_(g);
  }

  PipelineStage& st_;
  const Tensor& x_;
  const Tensor& y_;
  ProcessGroup& pp_;
  int M_;
  std::optional<DType> autocast_;
  amp::GradScaler* scaler_;
  int64_t b_ = 0, T_ = 0;
  std::vector<Kept> kept_;
  std::vector<Tensor> sent_;
  std::vector<std::shared_ptr<Work>> sends_;
  Tensor loss_;
};

}  // namespace

Tensor pipeline_forward_backward(PipelineStage& stage, const Tensor& x, const Tensor& y,
                                 ProcessGroup& pp, const PipelineOptions& o) {
  LOOM_CHECK(pp.size() == stage.stages() && pp.rank() == stage.stage(), "pipeline: stage ",
             stage.stage(), " of ", stage.stages(), " on rank ", pp.rank(), " of a group of ",
             pp.size(), " (the pipeline group's ranks are the stages)");
  LOOM_CHECK(o.micro_batches >= 1, "pipeline: micro_batches ", o.micro_batches);
  const int M = o.micro_batches, S = stage.stages(), s = stage.stage();
  amp::GradScaler* scaler = o.scaler && o.scaler->is_enabled() ? o.scaler : nullptr;
  if (scaler)
    scaler->place_state(stage.head_weight().device());  // Note [Loss scaling over a pipeline]
  StageStep step(stage, x, y, pp, M, o.autocast, scaler);
  if (o.schedule == PipelineSchedule::GPipe) {
    for (int m = 0; m < M; ++m) step.forward(m);
    for (int m = 0; m < M; ++m) step.backward(m);
  } else {  // 1F1B: fill, steady state, drain
    const int warmup = std::min(S - s - 1, M);
    for (int m = 0; m < warmup; ++m) step.forward(m);
    for (int i = 0; i < M - warmup; ++i) step.forward(warmup + i), step.backward(i);
    for (int m = M - warmup; m < M; ++m) step.backward(m);
  }
  return step.finish();
}

Tensor pipeline_forward(PipelineStage& stage, const Tensor& x, ProcessGroup& pp) {
  LOOM_CHECK(pp.size() == stage.stages() && pp.rank() == stage.stage(), "pipeline_forward: stage ",
             stage.stage(), " of ", stage.stages(), " on rank ", pp.rank(), " of a group of ",
             pp.size(), " (the pipeline group's ranks are the stages)");
  LOOM_CHECK(x.defined() && x.dim() == 2, "pipeline_forward: ids (b, T) expected on stage ",
             stage.stage(), ", got ", x.defined() ? describe(x) : std::string("(undefined)"));
  autograd::NoGradGuard no_grad;
  Tensor in = x;
  if (!stage.is_first()) {  // (b, T, C) from the stage before (T / tp: sequence parallel)
    const Tensor& w = stage.head_weight();
    in = empty({x.size(0), stage.boundary_length(x.size(1)), stage.hidden_size()},
               {.dtype = w.dtype(), .device = w.device()});
    pp.recv(in, stage.stage() - 1, kForwardTag)->wait();
  }
  Tensor out = stage.forward(in);
  if (stage.is_last()) return stage.logits(out);
  out = contiguous(out);
  pp.send(out, stage.stage() + 1, kForwardTag)->wait();  // received: the next stage is free
  return Tensor();
}

double pipeline_bubble(int stages, int micro_batches) {
  return double(stages - 1) / double(micro_batches + stages - 1);
}

Tensor clip_grad_norm_pipeline_(const PipelineStage& stage, double max_norm, ProcessGroup& pp) {
  autograd::NoGradGuard no_grad;
  const Tensor& w = stage.head_weight();
  const Options where{.dtype = w.dtype(), .device = w.device()};
  Tensor sq = scalar_tensor(0.0, where);
  std::vector<Tensor> grads;
  for (const Tensor& p : stage.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    const bool second_copy = stage.ties_head() && !stage.is_first() && p.is_same(w);
    if (!second_copy) sq = sq + sum(g * g);  // the tied matrix counted on the first stage
  }
  sq = contiguous(sq);
  pp.all_reduce(sq, ReduceOp::Sum)->wait();
  Tensor total = sqrt(sq);
  Tensor coef = minimum(rdiv(total + 1e-6, max_norm), scalar_tensor(1.0, where));
  for (Tensor& g : grads) g.mul_(coef);
  return total;
}

}  // namespace loom::distributed
