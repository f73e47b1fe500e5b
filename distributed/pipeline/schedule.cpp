// The pipeline schedules (distributed/pipeline/schedule.h, Note [Pipeline schedules]): a rank's
// actions (pipeline_actions) run over its chunks with the sends and receives between chunks, the
// tied head's gradients summed, the loss broadcast, evaluation's forward-only pass, and the clip
// over every stage. Leaves out: the actions' order (distributed/pipeline/interleaved_schedule.cpp).
#include "distributed/pipeline/schedule.h"

#include <unordered_set>
#include <vector>

#include "autograd/amp/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"

namespace loom::distributed {

namespace {

// One rank's step over its chunks: what each (chunk, micro-batch) keeps between its forward and
// its backward. Chunk v of this rank is the model's chunk v S + rank of S V (rank_chunks).
class StageStep {
 public:
  StageStep(const std::vector<PipelineStage*>& chunks, const Tensor& x, const Tensor& y,
            ProcessGroup& pp, ProcessGroup& grads, int M, std::optional<DType> autocast,
            amp::GradScaler* scaler)
      : chunks_(chunks),
        x_(x),
        y_(y),
        pp_(pp),
        grads_(grads),
        S_(pp.size()),
        M_(M),
        autocast_(autocast),
        scaler_(scaler),
        kept_(chunks.size() * size_t(M)) {
    const Tensor& rows = x.defined() ? x : y;  // the shapes, on a middle stage too
    LOOM_CHECK(rows.defined() && rows.dim() == 2 && rows.size(0) % M == 0, "pipeline: ", M,
               " micro-batches do not divide the batch ",
               rows.defined() ? describe(rows) : std::string("(undefined)"));
    b_ = rows.size(0) / M, T_ = rows.size(1);
    LOOM_CHECK(int64_t(2) * S_ * int64_t(chunks.size()) * M < kForwardTag, "pipeline: ", M,
               " micro-batches over ", S_ * chunks.size(), " chunks run out of message tags");
  }

  void forward(int v, int m) {
    PipelineStage& st = *chunks_[size_t(v)];
    const int c = st.stage();
    Kept& k = kept(v, m);
    if (st.is_first()) {
      k.in = slice(x_, 0, m * b_, (m + 1) * b_);
    } else {
      k.in = activation();
      pp_.recv(k.in, (c - 1) % S_, tag(c, m))->wait();
      k.in.requires_grad_(true);
    }
    amp::Autocast scope(autocast_);
    k.out = st.forward(k.in);
    if (st.is_last()) {
      k.out = st.loss(k.out, slice(y_, 0, m * b_, (m + 1) * b_)) / double(M_);
      loss_ = loss_.defined() ? loss_ + k.out.detach() : k.out.detach();
    } else {  // in the activations' dtype (the residual stream's: float32 under autocast too)
      send(pp_, to(k.out.detach(), activation_dtype()), (c + 1) % S_, tag(c + 1, m));
    }
  }

  void backward(int v, int m) {
    PipelineStage& st = *chunks_[size_t(v)];
    const int c = st.stage();
    Kept& k = kept(v, m);
    if (st.is_last()) {
      (scaler_ ? scaler_->scale(k.out) : k.out).backward();  // fp16: the loss scaled
    } else {
      Tensor grad = activation();
      grads_.recv(grad, (c + 1) % S_, tag(c, m) + 1)->wait();
      k.out.backward(to(grad, k.out.dtype()));
    }
    if (!st.is_first()) send(grads_, k.in.grad(), (c - 1) % S_, tag(c - 1, m) + 1);
    k = Kept{};  // this micro-batch's activations go
  }

  // Waits for the sends, sums a tied head's gradients (over pp) and the sequence-parallel norms'
  // (over tp), and broadcasts the loss from the last stage.
  Tensor finish() {
    for (auto& w : sends_) w->wait();
    sends_.clear(), sent_.clear();
    // A frozen tied matrix (LoRA's base) has no gradient; every stage sees the same flag.
    if (front().ties_head() && front().head_weight().requires_grad()) sum_tied_gradient();
    for (PipelineStage* st : chunks_)
      st->sync_sequence_parallel_grads();  // the norms' partial gradients, summed over tp
    const Tensor& w = front().head_weight();
    Tensor loss =
        loss_.defined() ? contiguous(loss_) : zeros({}, {.dtype = w.dtype(), .device = w.device()});
    pp_.broadcast(loss, S_ - 1)->wait();  // the last chunk's rank
    return loss;
  }

 private:
  struct Kept {
    Tensor in, out;
  };

  PipelineStage& front() const { return *chunks_.front(); }
  Kept& kept(int v, int m) { return kept_[size_t(v) * size_t(M_) + size_t(m)]; }
  // Note [Pipeline schedules]: micro-batch m's activations into chunk c (+ 1: its gradient).
  int tag(int c, int m) const { return 2 * (c * M_ + m); }
  DType activation_dtype() const { return front().head_weight().dtype(); }
  Tensor activation() const {
    const Tensor& w = front().head_weight();
    return empty({b_, front().boundary_length(T_), front().hidden_size()},
                 {.dtype = w.dtype(), .device = w.device()});
  }

  // On pp (activations) or grads_ (gradients: Note [Two groups for a pipeline's messages]).
  void send(ProcessGroup& group, const Tensor& t, int dst, int tag) {
    sent_.push_back(contiguous(t));  // alive until its send completes
    sends_.push_back(group.send(sent_.back(), dst, tag));
  }

  // The first and the last chunk's ranks each hold a gradient of the tied matrix; the others add 0.
  void sum_tied_gradient() {
    autograd::NoGradGuard no_grad;
    const Tensor& w = front().head_weight();
    bool holds = false;
    for (PipelineStage* st : chunks_) holds = holds || st->is_first() || st->is_last();
    Tensor g = holds && w.grad().defined() ? contiguous(w.grad()) : zeros_like(w);
    pp_.all_reduce(g, ReduceOp::Sum)->wait();
    if (holds) w.grad().copy_(g);
  }

  std::vector<PipelineStage*> chunks_;
  const Tensor& x_;
  const Tensor& y_;
  ProcessGroup& pp_;
  ProcessGroup& grads_;
  int S_, M_;
  std::optional<DType> autocast_;
  amp::GradScaler* scaler_;
  int64_t b_ = 0, T_ = 0;
  std::vector<Kept> kept_;
  std::vector<Tensor> sent_;
  std::vector<std::shared_ptr<Work>> sends_;
  Tensor loss_;
};

// The chunks are this rank's of `pp` (rank_chunks' order), all of one cut.
void check_chunks(const std::vector<PipelineStage*>& chunks, const ProcessGroup& pp,
                  const char* what) {
  const int S = pp.size(), V = int(chunks.size());
  LOOM_CHECK(V >= 1, what, ": no stage on rank ", pp.rank());
  for (int v = 0; v < V; ++v)
    LOOM_CHECK(
        chunks[size_t(v)]->stages() == S * V && chunks[size_t(v)]->stage() == v * S + pp.rank(),
        what, ": chunk ", v, " of rank ", pp.rank(), " is stage ", chunks[size_t(v)]->stage(),
        " of ", chunks[size_t(v)]->stages(), ", not ", v * S + pp.rank(), " of ", S * V,
        " (the pipeline group's ", "ranks hold the stages, chunk c on rank c mod ", S, ")");
}

// The group the gradients go back on: `given` (the same members as pp, in the same order) or pp.
ProcessGroup& gradient_group(ProcessGroup& pp, ProcessGroup* given, int M) {
  if (given) {
    LOOM_CHECK(given->size() == pp.size() && given->rank() == pp.rank() &&
                   given->world_ranks() == pp.world_ranks() && given->backend() == pp.backend(),
               "pipeline: the gradients' group (", given->backend(), ", rank ", given->rank(),
               " of ", given->size(), ") is not a second group of the pipeline's members (",
               pp.backend(), ", rank ", pp.rank(), " of ", pp.size(), ")");
  }
  LOOM_CHECK(pp.backend() != "nccl" || M == 1 || (given && given != &pp), "pipeline: ", M,
             " micro-batches over NCCL need a second group for the gradients "
             "(PipelineOptions::gradients, DeviceMesh::another_group): on one group's stream "
             "1F1B's crossing sends deadlock (Note [Two groups for a pipeline's messages])");
  return given ? *given : pp;
}

}  // namespace

Tensor pipeline_forward_backward(PipelineStage& stage, const Tensor& x, const Tensor& y,
                                 ProcessGroup& pp, const PipelineOptions& o) {
  return pipeline_forward_backward(std::vector<PipelineStage*>{&stage}, x, y, pp, o);
}

Tensor pipeline_forward_backward(const std::vector<PipelineStage*>& chunks, const Tensor& x,
                                 const Tensor& y, ProcessGroup& pp, const PipelineOptions& o) {
  check_chunks(chunks, pp, "pipeline");
  LOOM_CHECK(o.micro_batches >= 1, "pipeline: micro_batches ", o.micro_batches);
  const int M = o.micro_batches, S = pp.size(), V = int(chunks.size());
  const std::vector<PipelineAction> order = pipeline_actions(o.schedule, S, V, M, pp.rank());
  LOOM_CHECK(V == 1 || pp.backend() != "nccl",  // Note [Interleaved 1F1B]
             "pipeline: the interleaved schedule needs sends that complete whenever their peer "
             "receives (Gloo's, matched by tag); NCCL runs a rank's sends and receives in call "
             "order on one stream, matched by order per peer, which the V chunks' messages do not "
             "keep: use --pp-schedule 1f1b on GPUs for now");
  ProcessGroup& grads = gradient_group(pp, o.gradients, M);
  amp::GradScaler* scaler = o.scaler && o.scaler->is_enabled() ? o.scaler : nullptr;
  if (scaler)  // Note [Loss scaling over a pipeline]
    scaler->place_state(chunks.front()->head_weight().device());
  StageStep step(chunks, x, y, pp, grads, M, o.autocast, scaler);
  for (const PipelineAction& a : order)
    a.forward ? step.forward(a.chunk, a.micro_batch) : step.backward(a.chunk, a.micro_batch);
  return step.finish();
}

Tensor pipeline_forward(PipelineStage& stage, const Tensor& x, ProcessGroup& pp) {
  return pipeline_forward(std::vector<PipelineStage*>{&stage}, x, pp);
}

Tensor pipeline_forward(const std::vector<PipelineStage*>& chunks, const Tensor& x,
                        ProcessGroup& pp) {
  check_chunks(chunks, pp, "pipeline_forward");
  LOOM_CHECK(x.defined() && x.dim() == 2, "pipeline_forward: ids (b, T) expected on rank ",
             pp.rank(), ", got ", x.defined() ? describe(x) : std::string("(undefined)"));
  autograd::NoGradGuard no_grad;
  const int S = pp.size();
  for (PipelineStage* st : chunks) {
    const int c = st->stage();
    Tensor in = x;
    if (!st->is_first()) {  // (b, T, C) from the chunk before (T / tp: sequence parallel)
      const Tensor& w = st->head_weight();
      in = empty({x.size(0), st->boundary_length(x.size(1)), st->hidden_size()},
                 {.dtype = w.dtype(), .device = w.device()});
      pp.recv(in, (c - 1) % S, kForwardTag)->wait();
    }
    Tensor out = st->forward(in);
    if (st->is_last()) return st->logits(out);
    out = contiguous(out);
    pp.send(out, (c + 1) % S, kForwardTag)->wait();  // received: the next chunk is free
  }
  return Tensor();
}

double pipeline_bubble(int stages, int micro_batches, int virtual_stages) {
  return double(stages - 1) / double(virtual_stages * micro_batches + stages - 1);
}

Tensor clip_grad_norm_pipeline_(const PipelineStage& stage, double max_norm, ProcessGroup& pp) {
  return clip_grad_norm_pipeline_(std::vector<PipelineStage*>{const_cast<PipelineStage*>(&stage)},
                                  max_norm, pp);
}

Tensor clip_grad_norm_pipeline_(const std::vector<PipelineStage*>& chunks, double max_norm,
                                ProcessGroup& pp) {
  autograd::NoGradGuard no_grad;
  const Tensor& w = chunks.front()->head_weight();
  const Options where{.dtype = w.dtype(), .device = w.device()};
  const bool first_rank = chunks.front()->is_first();  // the tied matrix counted there
  Tensor sq = scalar_tensor(0.0, where);
  std::vector<Tensor> grads;
  std::unordered_set<const TensorImpl*> seen;
  for (const PipelineStage* st : chunks)
    for (const Tensor& p : st->parameters()) {
      Tensor g = p.grad();
      if (!g.defined() || !seen.insert(p.impl()).second) continue;
      grads.push_back(g);
      const bool second_copy = st->ties_head() && !first_rank && p.is_same(w);
      if (!second_copy) sq = sq + sum(g * g);
    }
  sq = contiguous(sq);
  pp.all_reduce(sq, ReduceOp::Sum)->wait();
  Tensor total = sqrt(sq);
  Tensor coef = minimum(rdiv(total + 1e-6, max_norm), scalar_tensor(1.0, where));
  for (Tensor& g : grads) g.mul_(coef);
  return total;
}

}  // namespace loom::distributed
