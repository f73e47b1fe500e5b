// DDP's all-reduce of a bucket. See distributed/ddp/all_reduce_buckets.h.
#include "distributed/ddp/all_reduce_buckets.h"

namespace loom::distributed {

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
