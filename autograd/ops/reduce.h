// Differentiable reductions: sum, mean, max/min (all elements, or along a dim), var; argmax;
// sum_to, which reduces a broadcast gradient back to its input's shape.
// Leaves out: prod, median, sort (not needed by the models loom trains).
#pragma once

#include "core/tensor.h"

namespace loom {

// Reduces a gradient of a broadcast result back to `shape` (sums over broadcast dims).
Tensor sum_to(const Tensor& g, const Shape& shape);

// dims may be negative and in any order; an empty list means every dim.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements; gradient split evenly among ties
Tensor min(const Tensor& x);
// Along one dim: values (differentiable; gradient to the selected index) and int64 indices.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace loom
