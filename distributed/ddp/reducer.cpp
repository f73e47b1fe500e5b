// DDP's reducer: hooks, bucket launches, the end of backward. See distributed/ddp/reducer.h; what
// a bucket's reduction does is distributed/ddp/bucket_reduction.cpp (DDP) or
// distributed/ddp/sharded_reduce_buckets.cpp (ZeRO).
#include "distributed/ddp/reducer.h"

#include <chrono>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops/factory.h"
#include "distributed/ddp/bucket_reduction.h"
#include "distributed/ddp/sharded_reduce_buckets.h"

namespace loom::distributed {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::shared_ptr<Reducer> Reducer::create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions opt) {
  std::shared_ptr<Reducer> r(new Reducer(std::move(params), std::move(names), std::move(pg), opt));
  r->install_hooks();
  return r;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> pg, ReducerOptions opt)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)), opt_(opt) {
  LOOM_CHECK(params_.size() == names_.size(), "Reducer: ", params_.size(), " parameters but ",
             names_.size(), " names");
  LOOM_CHECK(opt_.first_bucket_cap_bytes > 0 && opt_.bucket_cap_bytes > 0,
             "DistributedDataParallel: bucket caps must be positive, got first ",
             opt_.first_bucket_cap_bytes, " and ", opt_.bucket_cap_bytes, " bytes");
  if (opt_.comm_dtype)
    LOOM_CHECK(*opt_.comm_dtype == kBF16 || *opt_.comm_dtype == kF16 || *opt_.comm_dtype == kF32,
               "DistributedDataParallel: the gradient communication dtype must be bfloat16, "
               "float16 or float32, got ",
               dtype_name(*opt_.comm_dtype));
  reduction_ = make_reduction();
  if (!reduction_->rebuildable()) opt_.rebuild_buckets = false;
  ready_.assign(params_.size(), false);
  locally_used_.assign(params_.size(), 0);
  std::vector<size_t> order;
  for (size_t i = params_.size(); i-- > 0;) order.push_back(i);  // reverse registration order
  build_buckets(order);
}

std::unique_ptr<BucketReduction> Reducer::make_reduction() {
  if (opt_.zero_stage == 0) return std::make_unique<AllReduceBuckets>(*pg_, opt_.comm_dtype);
  return make_zero_reduction(opt_, *pg_, params_, buckets_);
}

void Reducer::install_hooks() {
  std::weak_ptr<Reducer> self = weak_from_this();
  for (size_t i = 0; i < params_.size(); ++i)
    autograd::register_post_accumulate_grad_hook(params_[i], [self, i](const Tensor&) {
      if (auto r = self.lock()) r->on_grad_ready(i);
    });
}

void Reducer::build_buckets(const std::vector<size_t>& order) {
  if (params_.empty()) return;
  std::vector<ParamLayout> layout;
  for (const Tensor& p : params_) layout.push_back({p.numel(), p.dtype(), p.device()});
  auto assignment =
      compute_bucket_assignment(layout, order, opt_.first_bucket_cap_bytes, opt_.bucket_cap_bytes);
  buckets_ = reduction_->allocate(params_, assignment);
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t k = 0; k < buckets_[b].params.size(); ++k) {
      bucket_of_[buckets_[b].params[k]] = b;
      slot_of_[buckets_[b].params[k]] = k;
    }
}

std::vector<std::vector<std::string>> Reducer::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(names_[i]);
  }
  return out;
}

std::vector<Tensor> Reducer::bucket_tensors() const {
  std::vector<Tensor> out;
  for (const Bucket& b : buckets_) out.push_back(b.comm.defined() ? b.comm : b.flat);
  return out;
}

void Reducer::rebuild_if_due() {
  if (!rebuild_due()) return;
  // Note [Bucket rebuild]: rank 0's arrival order, so every rank builds the same buckets.
  std::vector<size_t> order = arrival_;
  std::vector<bool> have(params_.size(), false);
  for (size_t i : order) have[i] = true;
  for (size_t i = params_.size(); i-- > 0;)
    if (!have[i]) order.push_back(i);
  if (pg_->size() > 1) {
    std::vector<int64_t> v(order.begin(), order.end());
    Tensor t = from_vector(v, {int64_t(v.size())}).to(params_[0].device());
    pg_->broadcast(t, 0)->wait();
    Tensor host = t.to(kCPU);
    const int64_t* p = host.data<int64_t>();
    for (size_t k = 0; k < order.size(); ++k) order[k] = size_t(p[k]);
  }
  build_buckets(order);
  rebuilt_ = true;
}

// Note [Reducer under graph capture]
// A captured training step (Note [The training step as a CUDA graph] in train/cuda_graph_step.h)
// records the reducer's device work once: the buckets' zero fill at forward, each bucket's 1/N
// scaling and all-reduce in bucket order, the waits that join the communication stream back into
// the capturing stream (Work::wait is a stream wait, never a host block: Note [NCCL under graph
// capture]) and the copies out of low-precision buffers. The host-side bookkeeping (hooks,
// readiness counts, launching in order) runs during the capture only, and every replay repeats
// the device work as captured. So what the reducer decides on the host between iterations must
// be settled before the capture: prepare_for_capture rebuilds the buckets now if the rebuild is
// due (the eager warm-up step recorded the arrival order; the rebuild's broadcast is read on the
// host), and refuses what needs the host inside a step: find_unused_parameters (the usage count
// is read back to drop gradients), ZeRO (the sharded optimizer is not captured yet), a group
// whose collectives cannot be captured (Gloo), and an unfinished reduction. From then on the
// buckets and their order are fixed: every rank captured rank 0's arrival order, so the replays'
// NCCL calls match across ranks.
void Reducer::check_capturable(const char* what) const {
  LOOM_CHECK(pg_->size() == 1 || pg_->collectives_capturable(), what,
             ": DistributedDataParallel's all-reduces over the ", pg_->backend(), " backend (",
             pg_->size(),
             " ranks) cannot be captured into a CUDA graph: Gloo runs each collective on its own "
             "host threads over CPU tensors, so there is no GPU work for a graph to hold. NCCL's "
             "collectives are captured: use the nccl backend (one CUDA device per process, what "
             "loomrun's workers on GPUs get), or run the step eagerly (without --cuda-graph)");
  LOOM_CHECK(!opt_.find_unused_parameters, what,
             ": find_unused_parameters reads the parameters' usage back on the host after every "
             "backward, which a CUDA graph cannot hold; construct DistributedDataParallel without "
             "it (every parameter must then take part in the loss) or run the step eagerly");
  reduction_->check_capturable(what);
  LOOM_CHECK(!require_finalize_, what,
             ": the previous backward's reduction never finished (Note [Unfinished reduction])");
}

void Reducer::prepare_for_capture() {
  check_capturable("DistributedDataParallel::prepare_for_capture");
  rebuild_if_due();
}

// Note [Unfinished reduction]
// Without find_unused_parameters every parameter must get a gradient in every synchronised
// backward: a bucket launches only when all of its gradients are ready, and buckets launch in
// order, so one missing gradient holds back its bucket and every later one. The end of that
// backward notices, leaves the reduction unfinished, and the next forward fails with the names
// of the parameters that got no gradient on this rank (the optimizer step in between would have
// used unreduced gradients: the run is not recoverable, so it stops here).
void Reducer::prepare_for_forward(bool sync) {
  if (require_finalize_) {
    std::ostringstream missing;
    int n = 0;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing << (n++ ? ", " : "") << "'" << names_[i] << "'";
    LOOM_FAIL("DistributedDataParallel: rank ", pg_->rank(), " of ", pg_->size(),
              ": the previous backward finished without a gradient for ", n,
              " parameter(s): ", missing.str(),
              ". Their buckets were never all-reduced, so this iteration cannot "
              "start. Either construct DistributedDataParallel with find_unused_parameters = true "
              "(DDPOptions::reducer), or make every parameter take part in the loss (e.g. remove "
              "the module that the forward skips, or set requires_grad(false) on its parameters "
              "before wrapping the model)");
  }
  rebuild_if_due();
  reduction_->bind_grads(buckets_, params_);
  expect_hooks_ = sync || reduction_->reduces_under_no_sync();
  started_ = false;
  ready_.assign(params_.size(), false);
  next_bucket_ = 0;
  for (Bucket& b : buckets_) b.pending = b.params.size();
  unused_.clear();
}

void Reducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  if (!expect_hooks_ || !opt_.find_unused_parameters) return;
  std::unordered_map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].impl()] = i;
  std::vector<bool> reached(params_.size(), false);
  std::unordered_set<const autograd::Node*> seen;
  std::vector<autograd::Node*> stack;
  for (const Tensor& o : outputs) {
    if (!o.defined() || !o.requires_grad()) continue;
    auto n = o.is_leaf() ? autograd::grad_accumulator(o) : o.grad_fn();
    if (n && seen.insert(n.get()).second) stack.push_back(n.get());
  }
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    if (n->is_accumulate_grad()) {
      auto it = index.find(n->leaf.impl());
      if (it != index.end()) reached[it->second] = true;
    }
    for (const auto& e : n->next)
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached[i]) unused_.push_back(i);
}

void Reducer::on_grad_ready(size_t i) {
  locally_used_[i] = 1;  // also in no_sync iterations: find_unused_parameters keeps their grads
  if (!expect_hooks_) return;  // no_sync, or a backward through a graph DDP did not make
  if (!started_) {
    started_ = true;
    require_finalize_ = true;
    std::weak_ptr<Reducer> self = weak_from_this();
    autograd::queue_callback([self] {
      if (auto r = self.lock()) r->finalize();
    });
    for (size_t u : unused_) mark_ready(u);
  }
  mark_ready(i);
  launch_ready_buckets();
}

void Reducer::mark_ready(size_t i) {
  LOOM_CHECK(!ready_[i], "DistributedDataParallel: rank ", pg_->rank(), ": parameter '", names_[i],
             "' received its gradient twice in one backward (a second backward through the same "
             "forward, or a parameter marked unused that still got a gradient); each forward of a "
             "DistributedDataParallel module takes exactly one backward");
  ready_[i] = true;
  if (!order_recorded_) arrival_.push_back(i);
  Bucket& b = buckets_[bucket_of_[i]];
  reduction_->take_grad(b, slot_of_[i], params_);
  --b.pending;
}

void Reducer::launch_ready_buckets() {
  autograd::NoGradGuard no_grad;
  const size_t lag = reduction_->finish_after();
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    if (opt_.before_reduce) {  // ReducerOptions::before_reduce
      std::vector<Tensor> params;
      for (size_t i : b.params) params.push_back(params_[i]);
      opt_.before_reduce(params, b.views);
    }
    reduction_->launch(b);
    if (lag > 0 && next_bucket_ > lag) reduction_->finish(buckets_[next_bucket_ - 1 - lag]);
  }
}

void Reducer::finalize() {
  expect_hooks_ = false;
  started_ = false;
  if (next_bucket_ < buckets_.size())
    return;  // Note [Unfinished reduction]: the next forward fails
  if (on_backward_computed_) on_backward_computed_();
  autograd::NoGradGuard no_grad;
  double t0 = now_s();
  for (Bucket& b : buckets_) reduction_->finish(b);
  if (opt_.find_unused_parameters && !params_.empty()) drop_unused_grads();
  last_wait_s_ = now_s() - t0;
  locally_used_.assign(params_.size(), 0);
  order_recorded_ = true;
  require_finalize_ = false;
  reduction_->backward_done(params_);
}

// Parameters no rank used keep no gradient (as in a single process), so the optimizer skips them;
// the others hold the mean, zeros included, on every rank.
void Reducer::drop_unused_grads() {
  std::vector<int32_t> used(locally_used_.begin(), locally_used_.end());
  Tensor t = from_vector(used, {int64_t(used.size())}).to(params_[0].device());
  if (pg_->size() > 1) pg_->all_reduce(t, ReduceOp::Sum)->wait();
  Tensor host = t.to(kCPU);
  for (size_t i = 0; i < params_.size(); ++i)
    if (host.data<int32_t>()[i] == 0) params_[i].set_grad(Tensor());
}

// Note [Join]
// A rank that has run out of data mirrors, for every iteration the others still run, exactly the
// collectives their forward and backward make: the rebuild broadcast (once), each bucket's
// all-reduce in order (with zeros: it contributes nothing) and find_unused_parameters' usage
// count. The active ranks divide by the whole world size, as PyTorch does by default. ZeRO has no
// shadow iteration: join with a ZeRO stage is an error (ShardedReduceBuckets::shadow).
void Reducer::shadow_iteration() {
  if (rebuild_due()) {
    require_finalize_ = false;
    prepare_for_forward(false);
  }
  autograd::NoGradGuard no_grad;
  reduction_->shadow(buckets_);
  if (opt_.find_unused_parameters && !params_.empty()) {
    Tensor t =
        zeros({int64_t(params_.size())}, {.dtype = DType::I32, .device = params_[0].device()});
    pg_->all_reduce(t, ReduceOp::Sum)->wait();
  }
}

}  // namespace loom::distributed
