// Megatron's f and g (distributed/tensor_parallel/tp_regions.h, Note [f and g]): an identity and
// an all-reduce, each the other's backward. Leaves out: overlapping the all-reduce with compute.
#include "distributed/tensor_parallel/tp_regions.h"

#include "autograd/function.h"

namespace loom::distributed {

namespace {

// A contiguous copy of t summed over the group (waits for it).
Tensor summed(const Tensor& t, ProcessGroup& group) {
  Tensor out = t.detach().clone();
  group.all_reduce(out, ReduceOp::Sum)->wait();
  return out;
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& x, ProcessGroup& tp) {
  Tensor out = x.detach();  // the same values: an alias with its own autograd node
  if (!autograd::any_requires_grad({x})) return out;
  ProcessGroup* g = &tp;  // the caller keeps the group alive until backward has run
  return record("copy_to_tensor_parallel", out, {x},
                [g](const Tensor& grad) -> Grads { return {summed(grad, *g)}; });
}

Tensor reduce_from_tensor_parallel(const Tensor& x, ProcessGroup& tp) {
  Tensor out = summed(x, tp);
  if (!autograd::any_requires_grad({x})) return out;
  return record("reduce_from_tensor_parallel", out, {x},
                [](const Tensor& grad) -> Grads { return {grad}; });
}

}  // namespace loom::distributed
