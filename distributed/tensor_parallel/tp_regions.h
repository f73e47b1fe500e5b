// The collectives at the edges of a tensor-parallel region, as autograd ops: Megatron-LM's f and
// g (Shoeybi et al., 2019, section 3), the two conjugates that make a pair of split matrices
// compute what the whole matrices compute. Leaves out: which layers use them (tp_linear.h) and
// sequence parallelism's all-gather / reduce-scatter along the sequence.
#pragma once

#include "core/tensor.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

// Note [f and g]
// A column-parallel Linear gives each of the tp ranks a slice of the output features; a
// row-parallel Linear after it takes that slice and gives each rank a partial sum of the output.
//   f = copy_to_tensor_parallel: before the column-parallel Linear. Forward: x as it is (every rank
//       holds the whole x). Backward: each rank's gradient of x covers only its slice's use of x,
//       so the gradients are summed over the group (an all-reduce).
//   g = reduce_from_tensor_parallel: after the row-parallel Linear. Forward: the partial sums are
//       summed over the group (an all-reduce). Backward: the gradient as it is (each rank's
//       partial sum contributed to the whole with weight 1).
// Between f and g each rank works on its slice alone; outside them every rank holds the same
// values, so the norms, embeddings and the loss are computed alike on every tp rank and their
// parameters' gradients agree without any further collective.

// f: x (any shape) -> x; the gradient summed over `tp`. Every rank of the group must call it.
Tensor copy_to_tensor_parallel(const Tensor& x, ProcessGroup& tp);
// g: x (any shape) -> the sum of every rank's x; the gradient passed through.
Tensor reduce_from_tensor_parallel(const Tensor& x, ProcessGroup& tp);

}  // namespace loom::distributed
