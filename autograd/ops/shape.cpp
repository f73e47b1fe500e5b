// Differentiable shape ops. Views wrap the raw view arithmetic of core/tensor_views.h and send
// the gradient back through the inverse view; copies route the gradient back unchanged.
#include "autograd/ops/shape.h"

#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/reduce.h"
#include "core/tensor_views.h"
#include "kernels/raw_ops.h"

namespace loom {

Tensor view(const Tensor& x, const Shape& s) {
  detail::check_defined("view", x);
  return record("view", raw::view(x, s), {x},
                [shape = x.shape()](const Tensor& g) { return Grads{reshape(g, shape)}; });
}

Tensor reshape(const Tensor& x, const Shape& s) {
  detail::check_defined("reshape", x);
  Shape target = raw::infer_shape("reshape", s, x.numel());
  if (raw::view_strides(x.shape(), x.strides(), target)) return view(x, target);
  return view(contiguous(x), target);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", x);
  Tensor out = raw::permute(x, dims);
  return record("permute", out, {x}, [dims, n = x.dim()](const Tensor& g) {
    std::vector<int64_t> inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[wrap_dim("permute", dims[i], n)] = int64_t(i);
    return Grads{permute(g, inv)};
  });
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  detail::check_defined("transpose", x);
  return record("transpose", raw::transpose(x, d0, d1), {x},
                [d0, d1](const Tensor& g) { return Grads{transpose(g, d0, d1)}; });
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", x);
  Tensor out = raw::slice(x, dim, start, end, step);
  dim = wrap_dim("slice", dim, x.dim());
  // Recompute the clamped start from the view's offset so the backward writes the same elements.
  int64_t first =
      x.size(dim) == 0 || x.stride(dim) == 0 ? 0 : (out.offset() - x.offset()) / x.stride(dim);
  return record(
      "slice", out, {x}, [shape = x.shape(), dim, first, step, n = out.size(dim)](const Tensor& g) {
        Tensor gx = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
        backend_for(g.device()).copy_(raw::slice(gx, dim, first, first + n * step, step), g);
        return Grads{gx};
      });
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  detail::check_defined("select", x);
  Tensor out = raw::select(x, dim, index);
  dim = wrap_dim("select", dim, x.dim());
  if (index < 0) index += x.size(dim);
  return record("select", out, {x}, [shape = x.shape(), dim, index](const Tensor& g) {
    Tensor gx = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
    backend_for(g.device()).copy_(raw::select(gx, dim, index), g);
    return Grads{gx};
  });
}

Tensor expand(const Tensor& x, const Shape& s) {
  detail::check_defined("expand", x);
  Tensor out = raw::expand(x, s);
  if (out.shape() == x.shape())
    return record("expand", out, {x}, [](const Tensor& g) { return Grads{g}; });
  return record("expand", out, {x},
                [shape = x.shape()](const Tensor& g) { return Grads{sum_to(g, shape)}; });
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  detail::check_defined("squeeze", x);
  return record("squeeze", raw::squeeze(x, dim), {x},
                [shape = x.shape()](const Tensor& g) { return Grads{reshape(g, shape)}; });
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  detail::check_defined("unsqueeze", x);
  return record("unsqueeze", raw::unsqueeze(x, dim), {x},
                [shape = x.shape()](const Tensor& g) { return Grads{reshape(g, shape)}; });
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  detail::check_defined("flatten", x);
  if (x.dim() == 0) return reshape(x, {1});
  start_dim = wrap_dim("flatten", start_dim, x.dim());
  end_dim = wrap_dim("flatten", end_dim, x.dim());
  LOOM_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape s(x.shape().begin(), x.shape().begin() + start_dim);
  int64_t n = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) n *= x.size(d);
  s.push_back(n);
  s.insert(s.end(), x.shape().begin() + end_dim + 1, x.shape().end());
  return reshape(x, s);
}

Tensor contiguous(const Tensor& x) {
  detail::check_defined("contiguous", x);
  if (x.is_contiguous()) return x;
  return clone(x);
}

Tensor to_channels_last(const Tensor& x) {
  detail::check_defined("to_channels_last", x);
  LOOM_CHECK(x.dim() == 4, "to_channels_last: expected a 4-d tensor (N, C, H, W), got ",
             describe(x));
  if (raw::is_channels_last(x)) return x;
  if (x.size(1) == 1 && x.is_contiguous())
    return permute(view(x, {x.size(0), x.size(2), x.size(3), 1}), {0, 3, 1, 2});
  Tensor out = raw::empty_channels_last(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  backend_for(x.device()).copy_(out, x);
  return record("to_channels_last", out, {x}, [](const Tensor& g) { return Grads{g}; });
}

Tensor clone(const Tensor& x) {
  detail::check_defined("clone", x);
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  backend_for(x.device()).copy_(out, x);
  return record("clone", out, {x}, [](const Tensor& g) { return Grads{g}; });
}

Tensor to(const Tensor& x, DType t) {
  detail::check_defined("to", x);
  if (x.dtype() == t) return x;
  LOOM_CHECK(!x.requires_grad() || is_floating(t) || !autograd::is_grad_enabled(),
             "to: cannot convert ", describe(x), " that requires grad to ", dtype_name(t),
             " (not differentiable)");
  Tensor out = raw::cast(x, t);
  return record("to", out, {x}, [from = x.dtype()](const Tensor& g) { return Grads{to(g, from)}; });
}

Tensor to(const Tensor& x, Device d) {
  detail::check_defined("to", x);
  if (x.device() == d) return x;
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = d});
  // The non-CPU side's backend knows how to move bytes across.
  backend_for(d.is_cpu() ? x.device() : d).copy_(out, x);
  return record("to", out, {x},
                [from = x.device()](const Tensor& g) { return Grads{to(g, from)}; });
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  LOOM_CHECK(!xs.empty(), "cat: expected at least one tensor");
  const Tensor& x0 = xs[0];
  dim = wrap_dim("cat", dim, x0.dim());
  Shape out_shape = x0.shape();
  out_shape[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    detail::check_pair("cat", x0, xs[i]);
    LOOM_CHECK(xs[i].dim() == x0.dim(), "cat: tensor ", i, " has shape ", xs[i].shape(),
               ", tensor 0 has ", x0.shape(), " (expected the same number of dims)");
    for (int64_t d = 0; d < x0.dim(); ++d)
      LOOM_CHECK(d == dim || xs[i].size(d) == x0.size(d), "cat: tensor ", i, " has shape ",
                 xs[i].shape(), ", tensor 0 has ", x0.shape(), " (sizes must match except in dim ",
                 dim, ")");
    out_shape[dim] += xs[i].size(dim);
  }
  Tensor out = empty(out_shape, {.dtype = x0.dtype(), .device = x0.device()});
  Backend& be = backend_for(x0.device());
  std::vector<int64_t> sizes;
  int64_t off = 0;
  for (const Tensor& x : xs) {
    be.copy_(raw::slice(out, dim, off, off + x.size(dim), 1), x);
    sizes.push_back(x.size(dim));
    off += x.size(dim);
  }
  return record("cat", out, xs, [dim, sizes](const Tensor& g) {
    Grads grads;
    int64_t o = 0;
    for (int64_t n : sizes) {
      grads.push_back(slice(g, dim, o, o + n));
      o += n;
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  LOOM_CHECK(!xs.empty(), "stack: expected at least one tensor");
  dim = wrap_dim("stack", dim, xs[0].dim() + 1);
  std::vector<Tensor> us;
  for (size_t i = 0; i < xs.size(); ++i) {
    LOOM_CHECK(xs[i].defined() && xs[i].shape() == xs[0].shape(), "stack: tensor ", i, " is ",
               describe(xs[i]), ", tensor 0 is ", describe(xs[0]), " (expected equal shapes)");
    us.push_back(unsqueeze(xs[i], dim));
  }
  return cat(us, dim);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x);
  detail::check_defined("index_select", index, "index");
  dim = wrap_dim("index_select", dim, x.dim());
  LOOM_CHECK(index.dim() == 1 && index.dtype() == DType::I64,
             "index_select: index must be a 1-d int64 ", "tensor, got ", describe(index));
  LOOM_CHECK(index.device() == x.device(), "index_select: index ", describe(index),
             " is not on the device of the input ", describe(x));
  Tensor out = backend_for(x.device()).index_select(x, dim, index);
  return record("index_select", out, {x}, [shape = x.shape(), dim, index](const Tensor& g) {
    return Grads{backend_for(g.device()).index_add(shape, dim, index, g)};
  });
}

}  // namespace loom
