// ZeRO's reduce-scatter of a bucket, stages 1 and 2. See Note [ZeRO gradient shards] in
// distributed/ddp/sharded_reduce_buckets.h.
#include "distributed/ddp/sharded_reduce_buckets.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "distributed/ddp/reducer.h"

namespace loom::distributed {

std::vector<Bucket> ShardedReduceBuckets::allocate(
    const std::vector<Tensor>& params, const std::vector<std::vector<size_t>>& assignment) {
  const int64_t n = pg_.size();
  std::vector<Bucket> out = make_buckets(params, assignment, std::nullopt, n);
  autograd::NoGradGuard no_grad;
  for (Bucket& b : out)
    b.shard = zeros({b.numel / n}, {.dtype = b.flat.dtype(), .device = b.flat.device()});
  return out;
}

void ShardedReduceBuckets::launch(Bucket& b) {
  if (!shards_fresh_) b.incoming = zeros_like(b.shard);  // added into the shard by finish
  Tensor& out = shards_fresh_ ? b.shard : b.incoming;
  if (pg_.size() == 1) {
    out.copy_(b.flat);
    return;
  }
  b.flat.mul_(1.0 / double(pg_.size()));
  b.work = pg_.reduce_scatter(out, b.flat, ReduceOp::Sum);
}

void ShardedReduceBuckets::finish(Bucket& b) {
  wait(b);
  if (!b.incoming.defined()) return;
  b.shard.add_(b.incoming);
  b.incoming = Tensor();
}

void ShardedReduceBuckets::backward_done(std::vector<Tensor>& params) {
  for (Tensor& p : params) p.set_grad(Tensor());  // this rank's unreduced gradient
  shards_fresh_ = false;
  if (on_shards_ready_) on_shards_ready_();
}

void ShardedReduceBuckets::shadow(std::vector<Bucket>&) {
  LOOM_FAIL("DistributedDataParallel::join: not supported with ZeRO stage ", zero_stage());
}

void ShardedReduceBuckets::check_capturable(const char* what) const {
  LOOM_FAIL(what, ": ZeRO stage ", zero_stage(),
            " is not captured into a CUDA graph (its sharded step runs eagerly)");
}

int64_t ShardedReduceBuckets::parameter_bytes() const {
  int64_t n = 0;
  for (const Tensor& p : params_) n += int64_t(p.numel() * p.element_size());
  return n;
}

// ---------------------------------------------------------------- stage 2

std::vector<Bucket> ShardedTransientBuckets::allocate(
    const std::vector<Tensor>& params, const std::vector<std::vector<size_t>>& assignment) {
  std::vector<Bucket> out = ShardedReduceBuckets::allocate(params, assignment);
  for (Bucket& b : out) b.flat = Tensor(), b.views.clear();  // allocated as gradients come
  return out;
}

void ShardedTransientBuckets::take_grad(Bucket& b, size_t k, std::vector<Tensor>& params) {
  if (!b.flat.defined()) allocate_flat(b, params);  // the bucket's first gradient
  Tensor& p = params[b.params[k]];
  autograd::NoGradGuard no_grad;
  if (p.grad().defined()) b.views[k].copy_(p.grad());
  p.set_grad(Tensor());  // the full-size gradient is dropped
}

void ShardedTransientBuckets::finish(Bucket& b) {
  ShardedReduceBuckets::finish(b);
  b.flat = Tensor(), b.views.clear();
}

std::unique_ptr<BucketReduction> make_zero_reduction(const ReducerOptions& opt, ProcessGroup& pg,
                                                     const std::vector<Tensor>& params,
                                                     const std::vector<Bucket>& buckets) {
  LOOM_CHECK(opt.zero_stage == 1 || opt.zero_stage == 2, "DistributedDataParallel: ZeRO stage ",
             opt.zero_stage,
             " is not 1 or 2 (stage 3 shards the parameters: FullyShardedDataParallel)");
  LOOM_CHECK(!opt.comm_dtype && !opt.find_unused_parameters, "DistributedDataParallel: ZeRO stage ",
             opt.zero_stage, " does not support comm_dtype or find_unused_parameters");
  if (opt.zero_stage == 1) return std::make_unique<ShardedReduceBuckets>(pg, params, buckets);
  return std::make_unique<ShardedTransientBuckets>(pg, params, buckets);
}

}  // namespace loom::distributed
