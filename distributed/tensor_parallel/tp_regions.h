// The collectives at the edges of a tensor-parallel region, as autograd ops: Megatron-LM's f and
// g (Shoeybi et al., 2019, section 3), the two conjugates that make a pair of split matrices
// compute what the whole matrices compute; and their sequence-parallel forms (Korthikanti et al.,
// 2022), which all-gather and reduce-scatter along the sequence instead. Leaves out: which layers
// use them (tp_linear.h, sequence_parallel.h) and overlapping the collectives with compute.
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

// Note [Sequence-parallel regions]
// With sequence parallel (Note [Sequence parallel] in sequence_parallel.h) the activations between
// the tensor-parallel regions are split along T, dim 1 of (B, T, ...): rank r holds positions
// [r T/tp, (r+1) T/tp). Korthikanti et al. (2022, section 4.2.2) replace f and g by a conjugate
// pair, each the other's backward (Megatron-LM: gather_from_sequence_parallel_region and
// reduce_scatter_to_sequence_parallel_region):
//   all_gather_sequence      (their g) before a column-parallel Linear. Forward: the slices
//       all-gathered into the whole sequence. Backward: each rank's gradient covers only its
//       slice's use of x, so the gradients are summed over the group and each rank keeps its
//       positions (a reduce-scatter).
//   reduce_scatter_sequence  (their g-bar) after a row-parallel Linear. Forward: the partial sums
//       summed over the group, each rank keeping its positions (a reduce-scatter: g's all-reduce
//       without the (tp-1)/tp of the sum no rank keeps). Backward: the slices' gradients
//       all-gathered (each position's sum took every rank's partial sum with weight 1).
// At the edges of the blocks, where the neighbours are replicated (every rank computes the same
// values):
//   split_sequence   entering the first block. Forward: this rank's positions of the whole x.
//       Backward: the slices' gradients all-gathered, so that every rank has the whole gradient
//       of the replicated x (as every rank would compute it without the split).
//   gather_sequence  leaving the last block. Forward: the slices all-gathered. Backward: every
//       rank holds the same whole gradient (what follows is replicated), so each keeps its
//       positions; no sum.
// T must be divisible by tp (an error names the op, the tensor, T and tp).

// (B, T/tp, ...) -> (B, T, ...); the gradient reduce-scattered over `tp`.
Tensor all_gather_sequence(const Tensor& x, ProcessGroup& tp);
// (B, T, ...) partial sums -> (B, T/tp, ...) this rank's positions of their sum; the gradient
// all-gathered.
Tensor reduce_scatter_sequence(const Tensor& x, ProcessGroup& tp);
// (B, T, ...) the same on every rank -> (B, T/tp, ...) this rank's positions; the gradient
// all-gathered.
Tensor split_sequence(const Tensor& x, ProcessGroup& tp);
// (B, T/tp, ...) -> (B, T, ...) the same on every rank; the gradient's positions of this rank.
Tensor gather_sequence(const Tensor& x, ProcessGroup& tp);

}  // namespace loom::distributed
