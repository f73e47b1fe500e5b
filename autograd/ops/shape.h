// Differentiable shape ops: the views (also as Tensor methods), copies (contiguous, clone, to),
// and the ops that assemble or pick: cat, stack, index_select.
// Leaves out: gather/scatter beyond index_select (not needed yet).
#pragma once

#include "core/tensor.h"

namespace loom {

Tensor view(const Tensor& x, const Shape& s);
Tensor reshape(const Tensor& x, const Shape& s);  // a view when possible, else a copy
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& s);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
// x (N, C, H, W) laid out channels-last (Note [Channels-last] in core/tensor_views.h): x itself
// when it already is, a view when C == 1 and x is contiguous (the memory is the same), else a
// copy. The gradient comes back in whatever layout it has.
Tensor to_channels_last(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType t);   // differentiable between floating dtypes
Tensor to(const Tensor& x, Device d);  // differentiable; asynchronous where the backend can

Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
// index: 1-d int64 on x's device.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace loom
