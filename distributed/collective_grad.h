// What the differentiable collectives share (distributed/sync_batch_norm.cpp's all-reduce, the
// tensor-parallel regions of distributed/tensor_parallel/tp_regions.cpp): a copy of a tensor summed
// over a group, and a collective's result recorded with a backward that runs over the group.
// Leaves out: the collectives (distributed/process_group/process_group.h) and what each op's
// forward and backward are (its own file's Notes).
#pragma once

#include "autograd/function.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

// A copy of t (clone is always contiguous) summed in place over the group; waits for it (Gloo: on
// the host; NCCL: the compute stream waits).
inline Tensor summed_copy(const Tensor& t, ProcessGroup& group) {
  Tensor out = t.detach().clone();
  group.all_reduce(out, ReduceOp::Sum)->wait();
  return out;
}

// out, op's result of x, recorded with x's gradient backward(grad, group) when x requires grad
// (else out as it is). The caller keeps the group alive until backward has run.
template <typename Backward>
Tensor with_group_backward(const char* op, const Tensor& x, Tensor out, ProcessGroup& group,
                           Backward backward) {
  if (!autograd::any_requires_grad({x})) return out;
  ProcessGroup* g = &group;
  return record(op, out, {x},
                [g, backward](const Tensor& grad) -> Grads { return {backward(grad, *g)}; });
}

}  // namespace loom::distributed
