// Raw views: new sizes/strides/offset over the same storage, with no autograd. The
// differentiable versions (Tensor::view, loom::permute, ...) in autograd/ops/shape.cpp call these.
// Leaves out: anything that copies data (contiguous, reshape of a non-viewable layout).
#pragma once

#include <optional>

#include "core/tensor.h"

namespace loom::raw {

// Resolves one -1 in `s` against numel; the error names the op and both shapes.
Shape infer_shape(const char* op, const Shape& s, int64_t numel);

// Strides for viewing (sizes, strides) as `target` without a copy, if possible (PyTorch's
// computeStride): each run of merged/split dims must be contiguous within itself.
std::optional<Strides> view_strides(const Shape& sizes, const Strides& strides,
                                    const Shape& target);

Tensor view(const Tensor& x, const Shape& s);  // error if the layout does not allow a view
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& s);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);

// Note [Channels-last]
// A 4-d tensor (N, C, H, W) is channels-last when its strides are those of an (N, H, W, C)
// tensor: (H*W*C, 1, W*C, C), checked exactly, size-1 dims included. So a (N, 1, H, W) tensor
// with the usual strides (H*W, H*W, W, 1) is not, although its memory is the same: channels-last
// is a choice its producer made (loom::to_channels_last), never a guess. Filters (K, C, R, S)
// use the same strides, KRSC. The CUDA convolution, batch norm and max pooling keep this layout
// from input to output; everything else reads it through its strides.
bool is_channels_last(const Tensor& x);

// An uninitialised (N, C, H, W) tensor laid out channels-last.
Tensor empty_channels_last(const Shape& s, Options opt = {});

}  // namespace loom::raw
