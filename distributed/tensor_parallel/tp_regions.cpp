// Megatron's f and g (distributed/tensor_parallel/tp_regions.h, Note [f and g]): an identity and
// an all-reduce, each the other's backward; and the sequence-parallel pairs (Note
// [Sequence-parallel regions]): all-gather and reduce-scatter along T, split and gather. Leaves
// out: overlapping the collectives with compute.
#include "distributed/tensor_parallel/tp_regions.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "distributed/collective_grad.h"

namespace loom::distributed {

namespace {

void check_sequence(const char* op, const Tensor& x, ProcessGroup& tp) {
  LOOM_CHECK(x.dim() >= 2, op, ": ", describe(x),
             " has no sequence dim (it should be (B, T, ...))");
  LOOM_CHECK(x.size(1) % tp.size() == 0, op, ": T ", x.size(1), " of ", describe(x),
             " is not divisible by tp ", tp.size(),
             " (sequence parallel gives each tensor-parallel rank T / tp positions)");
}

// (B, T, ...) <-> (T, B, ...), a contiguous copy: the collectives split and join along dim 0.
Tensor swap_batch_and_time(const Tensor& x) { return contiguous(transpose(x, 0, 1)); }

// (B, Tr, ...) on each rank -> (B, tp Tr, ...): every rank's positions, rank after rank.
Tensor gathered_along_t(const Tensor& x, ProcessGroup& group) {
  autograd::NoGradGuard no_grad;
  Tensor in = swap_batch_and_time(x.detach());  // (Tr, B, ...)
  Shape s = in.shape();
  s[0] *= group.size();
  Tensor out = empty(s, {.dtype = x.dtype(), .device = x.device()});  // (tp Tr, B, ...)
  group.all_gather(out, in)->wait();
  return swap_batch_and_time(out);
}

// (B, T, ...) on each rank -> (B, T/tp, ...): the sum over the ranks of this rank's positions.
Tensor reduce_scattered_along_t(const Tensor& x, ProcessGroup& group, const char* op) {
  check_sequence(op, x, group);
  autograd::NoGradGuard no_grad;
  Tensor in = swap_batch_and_time(x.detach());  // (T, B, ...)
  Shape s = in.shape();
  s[0] /= group.size();
  Tensor out = empty(s, {.dtype = x.dtype(), .device = x.device()});  // (T/tp, B, ...)
  group.reduce_scatter(out, in, ReduceOp::Sum)->wait();
  return swap_batch_and_time(out);
}

// (B, T, ...) -> (B, T/tp, ...): positions [r T/tp, (r+1) T/tp) of this rank r, a copy.
Tensor my_positions(const Tensor& x, ProcessGroup& group, const char* op) {
  check_sequence(op, x, group);
  autograd::NoGradGuard no_grad;
  const int64_t n = x.size(1) / group.size(), start = group.rank() * n;
  return contiguous(slice(x.detach(), 1, start, start + n)).clone();
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& x, ProcessGroup& tp) {
  // The same values: an alias with its own autograd node.
  return with_group_backward("copy_to_tensor_parallel", x, x.detach(), tp, summed_copy);
}

Tensor reduce_from_tensor_parallel(const Tensor& x, ProcessGroup& tp) {
  return with_group_backward("reduce_from_tensor_parallel", x, summed_copy(x, tp), tp,
                             [](const Tensor& grad, ProcessGroup&) { return grad; });
}

Tensor all_gather_sequence(const Tensor& x, ProcessGroup& tp) {
  return with_group_backward("all_gather_sequence", x, gathered_along_t(x, tp), tp,
                             [](const Tensor& grad, ProcessGroup& g) {
                               return reduce_scattered_along_t(grad, g,
                                                               "all_gather_sequence backward");
                             });
}

Tensor reduce_scatter_sequence(const Tensor& x, ProcessGroup& tp) {
  return with_group_backward("reduce_scatter_sequence", x,
                             reduce_scattered_along_t(x, tp, "reduce_scatter_sequence"), tp,
                             gathered_along_t);
}

Tensor split_sequence(const Tensor& x, ProcessGroup& tp) {
  return with_group_backward("split_sequence", x, my_positions(x, tp, "split_sequence"), tp,
                             gathered_along_t);
}

Tensor gather_sequence(const Tensor& x, ProcessGroup& tp) {
  return with_group_backward("gather_sequence", x, gathered_along_t(x, tp), tp,
                             [](const Tensor& grad, ProcessGroup& g) {
                               return my_positions(grad, g, "gather_sequence backward");
                             });
}

}  // namespace loom::distributed
