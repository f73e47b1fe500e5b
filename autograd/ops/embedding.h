// The embedding lookup (autograd/ops/embedding.cpp): rows of a weight table picked by integer ids,
// with a deterministic backward that adds up repeated ids.
// Leaves out: padding_idx, max_norm and sparse gradients (torch.nn.functional.embedding's
// options), and the Module that owns the table.
#pragma once

#include "core/tensor.h"

namespace loom {

// weight: (V, D) floating, ids: int64 of any shape S, each in [0, V) -> S + (D), out[s] =
// weight[ids[s]]. The gradient of weight is (V, D): row v sums the output gradients of every
// position whose id is v, in position order, the same bits on every run and on CPU and CUDA alike
// (Backend::embedding_backward). An id out of range is an error naming it and V: on the CPU at
// once; on CUDA it is found by the kernel and raised at the next synchronisation (Note [Errors
// found on the device] in core/cuda/device_error.h), under the name of index_select (forward) or
// embedding_backward.
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace loom
