// FullyShardedDataParallel's backward half (Note [FSDP] in distributed/fsdp/fsdp.h): each unit
// gathered again before its backward, its gradients reduce-scattered into the shards as soon as
// they are complete, and the end of backward (the root, stragglers, the optimizer's hook); the
// root a pipeline stage holds over its step (Note [FSDP over a pipeline stage]). Leaves out:
// gathering and the forward hooks (fsdp.cpp).
#include <algorithm>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "distributed/fsdp/fsdp.h"

namespace loom::distributed {

void FullyShardedDataParallel::ensure_end_of_backward_queued() {
  if (end_queued_) return;
  end_queued_ = true;
  autograd::queue_callback([this, alive = alive_] {
    if (*alive) end_of_backward();
  });
}

// The gradient reached one of unit u's outputs: the unit's backward is next. Gathers it (the
// prefetch started by the unit after it, usually) and prefetches the unit that ran before it.
void FullyShardedDataParallel::pre_backward(size_t u) {
  ensure_end_of_backward_queued();
  Unit& un = units_[u];
  if (un.in_backward) return;  // another output of the same unit
  gather(u);
  un.in_backward = true;
  un.grads_pending = 0;
  for (size_t i : layout_[u].params) un.grads_pending += params_[i].requires_grad() ? 1 : 0;
  const auto at = std::find(order_.rbegin(), order_.rend(), u);
  if (prefetch_ && at != order_.rend() && std::next(at) != order_.rend())
    gather(*std::next(at), /*wait=*/false);
}

// A parameter of unit u has its whole gradient for this backward (each leaf's accumulator runs
// once per pass, with the sum over all its uses).
void FullyShardedDataParallel::on_grad(size_t u) {
  ensure_end_of_backward_queued();
  if (u == 0) return;  // the root: reduced at the end of backward
  Unit& un = units_[u];
  if (un.in_backward && --un.grads_pending == 0) reduce(u);
}

// Unit u's gradients (zeros where a parameter has none) into one flat buffer, scaled by 1/N and
// reduce-scattered; the parameters' .grad and the gathered unit released. At most one reduction
// stays in flight: the previous one is finished first.
void FullyShardedDataParallel::reduce(size_t u) {
  finish_reductions();
  autograd::NoGradGuard no_grad;
  const Bucket& b = layout_[u];
  const int64_t N = pg_->size();
  if (before_reduce_) {  // FSDPOptions::before_reduce
    std::vector<Tensor> unit_params;
    for (size_t i : b.params) unit_params.push_back(params_[i]);
    before_reduce_(u, unit_params);
  }
  Tensor flat = zeros({b.numel}, {.dtype = b.shard.dtype(), .device = b.shard.device()});
  for (size_t k = 0; k < b.params.size(); ++k) {
    Tensor& p = params_[b.params[k]];
    if (!p.grad().defined()) continue;
    make_view(flat, p.shape(), contiguous_strides(p.shape()), b.offsets[k]).copy_(p.grad());
    p.set_grad(Tensor());
  }
  if (N > 1) flat.mul_(1.0 / double(N));
  Reduction r{u, flat,
              N > 1 ? empty({b.numel / N}, {.dtype = flat.dtype(), .device = flat.device()}) : flat,
              nullptr};
  if (N > 1) r.work = pg_->reduce_scatter(r.incoming, r.flat, ReduceOp::Sum);
  reductions_.push_back(std::move(r));
  units_[u].in_backward = false;
  release(u);
}

// Waits for the reductions in flight and adds each into its unit's gradient shard.
void FullyShardedDataParallel::finish_reductions() {
  autograd::NoGradGuard no_grad;
  for (Reduction& r : reductions_) {
    if (r.work) r.work->wait();
    layout_[r.unit].shard.add_(r.incoming);  // zero_shards zero-fills them
  }
  reductions_.clear();
}

// Queued by the first hook of a backward: units whose parameters did not all get a gradient,
// then the root, are reduced (in unit order, the same on every rank); everything is released.
void FullyShardedDataParallel::end_of_backward() {
  end_queued_ = false;
  for (size_t u = 1; u < units_.size(); ++u)
    if (units_[u].in_backward) reduce(u);
  if (root_in_backward_ && !layout_[0].params.empty()) reduce(0);
  root_in_backward_ = false;
  finish_reductions();
  for (size_t u = root_held_ ? 1 : 0; u < units_.size(); ++u)
    release(u);  // prefetched but unused ones too
  if (on_shards_ready_) on_shards_ready_();
}

// Note [FSDP over a pipeline stage]. The order of the last step's forwards is kept for prefetching.
void FullyShardedDataParallel::hold_root() {
  if (!order_.empty()) last_order_ = std::move(order_);
  order_.clear();
  gather(0);
  root_held_ = true;
}

void FullyShardedDataParallel::release_root(bool reduce_grads) {
  LOOM_CHECK(root_held_, "FullyShardedDataParallel::release_root: hold_root was not called");
  root_held_ = false;
  if (reduce_grads && !layout_[0].params.empty()) reduce(0);
  finish_reductions();
  release(0);
  if (reduce_grads && on_shards_ready_) on_shards_ready_();
}

void FullyShardedDataParallel::zero_shards() {
  autograd::NoGradGuard no_grad;
  for (Bucket& b : layout_) b.shard.zero_();  // a unit no backward reaches has a zero gradient
}

}  // namespace loom::distributed
