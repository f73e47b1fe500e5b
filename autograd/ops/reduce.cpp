// Differentiable reductions. Backward of a reduction broadcasts the gradient back over the
// reduced dims (expand of a keepdim view: no copy until the consumer needs one).
#include "autograd/ops/reduce.h"

#include <algorithm>

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/shape.h"
#include "kernels/raw_ops.h"

namespace loom {

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  // Sum the leading dims that `shape` lacks, and the dims where `shape` has 1 but g does not.
  size_t lead = g.dim() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < size_t(g.dim()); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.size(d) != 1)) dims.push_back(int64_t(d));
  Tensor s = dims.empty() ? g : backend_for(g.device()).reduce(ReduceOp::Sum, g, dims, true);
  return raw::view(raw::contiguous(s), shape);
}

namespace {

// Wrapped, sorted, unique dims; empty input means every dim.
std::vector<int64_t> normalize_dims(const char* op, const std::vector<int64_t>& dims,
                                    int64_t ndim) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(wrap_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  LOOM_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim repeats in ",
             dims);
  if (out.empty())
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
  return out;
}

// The shape of the result with keepdim = true.
Shape keepdim_shape(const Shape& s, const std::vector<int64_t>& dims) {
  Shape k = s;
  for (int64_t d : dims) k[d] = 1;
  return k;
}

int64_t count_over(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s[d];
  return n;
}

}  // namespace

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims_in, bool keepdim) {
  const Tensor x = amp::cast_fp32(x_in);
  detail::check_defined("sum", x);
  auto dims = normalize_dims("sum", dims_in, x.dim());
  Tensor out = backend_for(x.device()).reduce(ReduceOp::Sum, x, dims, keepdim);
  return record("sum", out, {x}, [shape = x.shape(), dims](const Tensor& g) {
    return Grads{expand(reshape(g, keepdim_shape(shape, dims)), shape)};
  });
}

Tensor mean(const Tensor& x_in, const std::vector<int64_t>& dims_in, bool keepdim) {
  const Tensor x = amp::cast_fp32(x_in);
  detail::check_defined("mean", x);
  detail::check_floating("mean", x);
  auto dims = normalize_dims("mean", dims_in, x.dim());
  Tensor out = backend_for(x.device()).reduce(ReduceOp::Mean, x, dims, keepdim);
  double n = double(count_over(x.shape(), dims));
  return record("mean", out, {x}, [shape = x.shape(), dims, n](const Tensor& g) {
    return Grads{expand(reshape(g / n, keepdim_shape(shape, dims)), shape)};
  });
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims_in, int64_t correction, bool keepdim) {
  detail::check_defined("var", x);
  detail::check_floating("var", x);
  auto dims = normalize_dims("var", dims_in, x.dim());
  double n = double(count_over(x.shape(), dims));
  LOOM_CHECK(n - double(correction) > 0, "var: ", int64_t(n), " elements with correction ",
             correction, " leave no degrees of freedom (shape ", x.shape(), ")");
  // Composite: mean of squared deviations; its gradient comes from the pieces.
  Tensor centered = x - mean(x, dims, true);
  return sum(square(centered), dims, keepdim) / (n - double(correction));
}

namespace {
Tensor extreme_all(const char* name, ReduceOp op, const Tensor& x) {
  detail::check_defined(name, x);
  LOOM_CHECK(x.numel() > 0, name, ": cannot reduce an empty tensor ", describe(x));
  auto dims = normalize_dims(name, {}, x.dim());
  Tensor out = backend_for(x.device()).reduce(op, x, dims, false);
  return record(name, out, {x}, [sx = save(x, name), so = save(out, name)](const Tensor& g) {
    // Split the gradient evenly among the elements equal to the extreme.
    const Tensor& x = sx.get();
    Tensor hit = eq(x, expand(so.get(), x.shape())).to(x.dtype());
    return Grads{hit * (g / sum(hit))};
  });
}
}  // namespace

Tensor max(const Tensor& x) { return extreme_all("max", ReduceOp::Max, x); }
Tensor min(const Tensor& x) { return extreme_all("min", ReduceOp::Min, x); }

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("max", x);
  dim = wrap_dim("max", dim, x.dim());
  auto [values, indices] = backend_for(x.device()).max_dim(x, dim, keepdim);
  values = record(
      "max", values, {x}, [shape = x.shape(), dim, keepdim, indices = indices](const Tensor& g) {
        Tensor gk = keepdim ? g : unsqueeze(g, dim);
        Tensor ik = keepdim ? indices : unsqueeze(indices, dim);
        // Scatter g into the argmax positions: one-hot along dim via a comparison with arange.
        Shape ar_shape(shape.size(), 1);
        ar_shape[dim] = shape[dim];
        Tensor ar = arange(0, double(shape[dim]), 1, {.dtype = DType::I64, .device = g.device()})
                        .view(ar_shape);
        Tensor onehot = eq(expand(ar, shape), expand(ik, shape));
        return Grads{where(onehot, expand(gk, shape),
                           zeros(shape, {.dtype = g.dtype(), .device = g.device()}))};
      });
  return {values, indices};
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("argmax", x);
  dim = wrap_dim("argmax", dim, x.dim());
  return backend_for(x.device()).max_dim(x, dim, keepdim).second;
}

}  // namespace loom
