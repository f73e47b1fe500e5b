// Shapes and strides: numel, contiguous strides, dim wrapping, broadcasting.
// Leaves out: the views themselves (core/tensor_views.cpp) and memory (core/storage.h).
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

using Shape = std::vector<int64_t>;    // sizes, outermost first
using Strides = std::vector<int64_t>;  // in elements, not bytes

int64_t numel(const Shape& s);
Strides contiguous_strides(const Shape& s);

// Wraps a possibly negative dim into [0, ndim); the error names the op, the dim and the rank.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

// The NumPy/PyTorch broadcast of two shapes (aligned at the right; sizes equal or one of them 1).
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// Strides that read a tensor of shape `s`/`st` as if it had shape `target` (stride 0 along
// broadcast dims). `s` must broadcast to `target`.
Strides broadcast_strides(const Shape& s, const Strides& st, const Shape& target);

}  // namespace loom
