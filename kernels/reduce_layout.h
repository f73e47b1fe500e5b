// How both backends lay out a reduction: the result's shape, and a permutation that puts the
// kept dims first and the reduced dims last, so the input reads as (outer, inner) rows; the
// argument checks of reduce and max_dim, the name of a reduction in error messages, and reduce's
// result tensor.
// Leaves out: the kernels (kernels/cpu/cpu_reduce.cpp, kernels/cuda/elementwise/cuda_reduce.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "kernels/backend.h"
#include "kernels/params.h"

namespace loom {

// "sum", "mean", "max", "min": the op named in a reduction's errors.
inline const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Mean:
      return "mean";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "reduce";
}

struct ReduceLayout {
  Shape out_shape;                 // the input's shape without the reduced dims (1s with keepdim)
  std::vector<int64_t> perm;       // kept dims, then reduced dims
  int64_t outer = 1, inner = 1;    // elements of the kept dims; of the reduced dims
  bool reduced_dims_lead = false;  // the reduced dims are exactly 0..k-1 (a column reduction)
};

// dims: sorted, unique, wrapped; empty means every dim.
inline ReduceLayout reduce_layout(const Shape& shape, const std::vector<int64_t>& dims,
                                  bool keepdim) {
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (int64_t d : dims) reduced[size_t(d)] = true;
  ReduceLayout L;
  std::vector<int64_t> red;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) {
      red.push_back(int64_t(d));
      L.inner *= shape[d];
      if (keepdim) L.out_shape.push_back(1);
    } else {
      L.perm.push_back(int64_t(d));
      L.outer *= shape[d];
      L.out_shape.push_back(shape[d]);
    }
  }
  L.reduced_dims_lead = !red.empty() && red.back() == int64_t(red.size()) - 1;
  L.perm.insert(L.perm.end(), red.begin(), red.end());
  return L;
}

// reduce(op, x, dims, keepdim)'s layout, after the checks both backends make: max and min need
// at least one element to reduce, mean a floating dtype.
inline ReduceLayout checked_reduce_layout(ReduceOp op, const Shape& shape, DType dtype,
                                          const std::vector<int64_t>& dims, bool keepdim) {
  ReduceLayout L = reduce_layout(shape, dims, keepdim);
  LOOM_CHECK(L.inner > 0 || op == ReduceOp::Sum || op == ReduceOp::Mean, reduce_name(op),
             ": cannot reduce over zero elements (shape ", shape, ")");
  LOOM_CHECK(op != ReduceOp::Mean || is_floating(dtype), "mean: dtype ", dtype_name(dtype),
             " is not supported (expected a floating type)");
  return L;
}

// What a sum or mean over zero elements gives (as PyTorch): 0 and NaN.
inline double empty_reduction_value(ReduceOp op) {
  return op == ReduceOp::Mean ? std::numeric_limits<double>::quiet_NaN() : 0.0;
}

// reduce's result for input x laid out as L, on x's device; when there is nothing to reduce
// (L.inner == 0) it is already final, filled with empty_reduction_value by be.
inline Tensor reduce_result(Backend& be, ReduceOp op, const Tensor& x, const ReduceLayout& L) {
  Tensor out = empty(L.out_shape, {.dtype = x.dtype(), .device = x.device()});
  if (L.inner == 0) be.fill_(out, empty_reduction_value(op));
  return out;
}

// max_dim(x, dim, keepdim)'s layout (dim: wrapped), after checking that dim is not empty.
inline ReduceLayout max_dim_layout(const Shape& shape, int64_t dim, bool keepdim) {
  LOOM_CHECK(shape[size_t(dim)] > 0, "max: cannot take the max over dim ", dim,
             " of size 0 (shape ", shape, ")");
  return reduce_layout(shape, {dim}, keepdim);
}

}  // namespace loom
