// Max pooling over channels-last tensors a vector of channels per thread (Note [Channels-last
// pooling in channel vectors], kernels/cuda/conv/cuda_pool_cl.cu): the fast path of
// CudaBackend::max_pool2d and its backward for ResNet's stem pooling. The general kernels of
// cuda_pool.cu take every other case and are the reference the tests compare these with.
#pragma once

#include "core/tensor.h"
#include "kernels/layout.h"

namespace loom::cuda {

// x: (N, C, H, W) channels-last -> y, idx (N, C, P, Q) channels-last, already allocated. Returns
// false, touching nothing, when the fast path does not apply (C not a multiple of a 16-byte
// vector, a pointer not aligned to one, or the naive kernels asked for).
bool max_pool2d_cl_vectors(const Tensor& x, const Tensor& y, const Tensor& idx, const PoolGeom& g);

// gy, idx: (N, C, P, Q) channels-last -> gx (N, C, H, W) channels-last, already allocated; the
// gather of Note [Max pool gather]. Returns false as above.
bool max_pool2d_backward_cl_vectors(const Tensor& gy, const Tensor& idx, const Tensor& gx,
                                    const PoolGeom& g);

}  // namespace loom::cuda
