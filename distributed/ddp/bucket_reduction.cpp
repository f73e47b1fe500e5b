// The parts of a bucket reduction every kind may share (the gradients as views into the buckets,
// Note [Gradients as bucket views], and the wait), then DDP's kind, the all-reduce. See
// distributed/ddp/bucket_reduction.h.
#include "distributed/ddp/bucket_reduction.h"

#include "autograd/grad_mode.h"

namespace loom::distributed {

namespace {
bool same_memory(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape();
}
}  // namespace

void BucketReduction::bind_grads(std::vector<Bucket>& buckets, std::vector<Tensor>& params) {
  autograd::NoGradGuard no_grad;
  for (Bucket& b : buckets) {
    std::vector<size_t> to_zero;
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor& p = params[b.params[k]];
      Tensor g = p.grad();
      if (!g.defined()) {
        to_zero.push_back(k);
      } else if (!same_memory(g, b.views[k])) {
        b.views[k].copy_(g);
        p.set_grad(b.views[k]);
      }
    }
    if (to_zero.size() == b.params.size())
      b.flat.zero_();
    else
      for (size_t k : to_zero) b.views[k].zero_();
    for (size_t k : to_zero) params[b.params[k]].set_grad(b.views[k]);
  }
}

void BucketReduction::take_grad(Bucket& b, size_t k, std::vector<Tensor>& params) {
  Tensor& p = params[b.params[k]];
  Tensor view = b.views[k];
  Tensor g = p.grad();
  autograd::NoGradGuard no_grad;
  if (!g.defined()) {
    view.zero_();
    p.set_grad(view);
  } else if (!same_memory(g, view)) {
    view.copy_(g);
    p.set_grad(view);
  }
}

void BucketReduction::wait(Bucket& b) {
  if (!b.work) return;
  b.work->wait();
  b.work.reset();
}

// ---- AllReduceBuckets: DDP's

std::vector<Bucket> AllReduceBuckets::allocate(const std::vector<Tensor>& params,
                                               const std::vector<std::vector<size_t>>& assignment) {
  return make_buckets(params, assignment, comm_dtype_);
}

void AllReduceBuckets::launch(Bucket& b) {
  // A world of one: the gradients are already the mean. A one-rank group whose collectives can
  // be captured (NCCL) still runs them: they are what a captured step holds, and the one-GPU test
  // of the captured DDP step (tests/train/test_cuda_step_runner_ddp_graph.cpp) relies on it.
  if (pg_.size() == 1 && !pg_.collectives_capturable()) return;
  b.flat.mul_(1.0 / double(pg_.size()));
  if (b.comm.defined()) {
    b.comm.copy_(b.flat);
    b.work = pg_.all_reduce(b.comm, ReduceOp::Sum);
  } else {
    b.work = pg_.all_reduce(b.flat, ReduceOp::Sum);
  }
}

void AllReduceBuckets::finish(Bucket& b) {
  if (!b.work) return;  // finished already, or never launched (a world of one): flat is the mean
  wait(b);
  if (b.comm.defined()) b.flat.copy_(b.comm);
}

void AllReduceBuckets::shadow(std::vector<Bucket>& buckets) {
  for (Bucket& b : buckets) {
    Tensor& t = b.comm.defined() ? b.comm : b.flat;
    t.zero_();
    pg_.all_reduce(t, ReduceOp::Sum)->wait();
  }
}

}  // namespace loom::distributed
