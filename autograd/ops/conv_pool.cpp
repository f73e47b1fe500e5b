// Differentiable convolution and pooling over NCHW tensors: conv2d (with an optional bias),
// max_pool2d, avg_pool2d, adaptive_avg_pool2d. Each checks its arguments (errors name the op and
// the shapes), calls one backend kernel, and records the backward beside it.
// Leaves out: transposed convolution, ceil_mode and dilation in pooling, 1-d/3-d variants.
#include "autograd/ops/conv_pool.h"

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "kernels/raw_ops.h"

namespace loom {

namespace {

Shape pair(const std::array<int64_t, 2>& a) { return {a[0], a[1]}; }

void check_conv_args(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  detail::check_pair("conv2d", x, w);
  detail::check_floating("conv2d", x);
  LOOM_CHECK(x.dim() == 4, "conv2d: expected a 4-d input (N, C, H, W), got ", describe(x));
  LOOM_CHECK(w.dim() == 4, "conv2d: expected a 4-d weight (K, C/groups, R, S), got ", describe(w));
  LOOM_CHECK(p.groups > 0, "conv2d: groups must be positive, got ", p.groups);
  for (int i = 0; i < 2; ++i) {
    LOOM_CHECK(p.stride[i] > 0, "conv2d: stride must be positive, got ", pair(p.stride));
    LOOM_CHECK(p.dilation[i] > 0, "conv2d: dilation must be positive, got ", pair(p.dilation));
    LOOM_CHECK(p.padding[i] >= 0, "conv2d: padding must be non-negative, got ", pair(p.padding));
  }
  const int64_t C = x.size(1), K = w.size(0);
  LOOM_CHECK(C % p.groups == 0, "conv2d: groups=", p.groups, " does not divide the ", C,
             " channels of input ", x.shape());
  LOOM_CHECK(K % p.groups == 0, "conv2d: groups=", p.groups, " does not divide the ", K,
             " output channels of weight ", w.shape());
  LOOM_CHECK(w.size(1) * p.groups == C, "conv2d: input ", x.shape(), " has ", C,
             " channels, weight ", w.shape(), " expects ", w.size(1) * p.groups, " (", w.size(1),
             " * groups=", p.groups, ")");
  for (int i = 0; i < 2; ++i) {
    int64_t padded = x.size(2 + i) + 2 * p.padding[i];
    int64_t kernel = p.dilation[i] * (w.size(2 + i) - 1) + 1;
    LOOM_CHECK(kernel <= padded, "conv2d: kernel ", w.size(2), "x", w.size(3), " (dilation ",
               pair(p.dilation), ") is larger than the padded input: input ", x.shape(),
               " with padding ", pair(p.padding), " gives no output (output size ",
               (padded - kernel) / p.stride[i] + 1, " in dim ", 2 + i, ")");
  }
  if (b.defined()) {
    LOOM_CHECK(b.device() == x.device() && b.dtype() == x.dtype(), "conv2d: bias ", describe(b),
               " does not match input ", describe(x));
    LOOM_CHECK(b.dim() == 1 && b.size(0) == K, "conv2d: bias ", b.shape(), " should be [", K,
               "] for weight ", w.shape());
  }
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dParams& p) {
  // Under autocast on CUDA: low precision, channels-last (Note [Autocast channels-last]).
  const Tensor x = amp::conv_layout(amp::cast_lower(x_in)),
               weight = amp::conv_layout(amp::cast_lower(weight_in)),
               bias = amp::cast_lower(bias_in);
  detail::check_defined("conv2d", x);
  detail::check_defined("conv2d", weight, "weight");
  check_conv_args(x, weight, bias, p);
  Backend& be = backend_for(x.device());
  Tensor out = be.conv2d(x, weight, p);
  // The bias broadcasts over (N, P, Q): added in place to the fresh output.
  if (bias.defined()) be.binary_(BinaryOp::Add, out, raw::view(bias, {1, bias.size(0), 1, 1}));
  return record("conv2d", out, {x, weight, bias},
                [sx = save(x, "conv2d"), sw = save(weight, "conv2d"), p](const Tensor& g) {
                  const Tensor &x = sx.get(), &w = sw.get();
                  Backend& be = backend_for(g.device());
                  Grads grads(3);
                  if (needs_input_grad(0)) grads[0] = be.conv2d_backward_input(g, w, x.shape(), p);
                  if (needs_input_grad(1)) grads[1] = be.conv2d_backward_weight(g, x, w.shape(), p);
                  // Bias: sum over (P, Q) then over N; each step reduces contiguous runs in place.
                  if (needs_input_grad(2))
                    grads[2] = be.reduce(ReduceOp::Sum, be.reduce(ReduceOp::Sum, g, {2, 3}, false),
                                         {0}, false);
                  return grads;
                });
}

namespace {

// Pooling takes (N, C, H, W) or unbatched (C, H, W); f sees the 4-d form.
template <typename F>
Tensor with_batch(const char* op, const Tensor& x, const F& f) {
  detail::check_defined(op, x);
  LOOM_CHECK(x.dim() == 3 || x.dim() == 4, op,
             ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got ", describe(x));
  if (x.dim() == 3) return squeeze(f(unsqueeze(x, 0)), 0);
  return f(x);
}

void check_pool_args(const char* op, const Tensor& x, const Pool2dParams& p) {
  detail::check_floating(op, x);
  for (int i = 0; i < 2; ++i) {
    LOOM_CHECK(p.kernel[i] > 0, op, ": kernel size must be positive, got ", pair(p.kernel));
    LOOM_CHECK(p.stride[i] > 0, op, ": stride must be positive, got ", pair(p.stride));
    LOOM_CHECK(p.padding[i] >= 0 && 2 * p.padding[i] <= p.kernel[i], op, ": padding ",
               pair(p.padding), " should be between 0 and half the kernel size ", pair(p.kernel));
    LOOM_CHECK(x.size(2 + i) + 2 * p.padding[i] >= p.kernel[i], op, ": kernel ", pair(p.kernel),
               " is larger than the padded input: input ", x.shape(), " with padding ",
               pair(p.padding));
  }
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  return with_batch("max_pool2d", x_in, [&](const Tensor& x) {
    check_pool_args("max_pool2d", x, p);
    auto [out, indices] = backend_for(x.device()).max_pool2d(x, p);
    return record("max_pool2d", out, {x},
                  [indices = indices, shape = x.shape(), p](const Tensor& g) {
                    return Grads{backend_for(g.device()).max_pool2d_backward(g, indices, shape, p)};
                  });
  });
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  return with_batch("avg_pool2d", x_in, [&](const Tensor& x) {
    check_pool_args("avg_pool2d", x, p);
    Tensor out = backend_for(x.device()).avg_pool2d(x, p);
    return record("avg_pool2d", out, {x}, [p, shape = x.shape()](const Tensor& g) {
      return Grads{backend_for(g.device()).avg_pool2d_backward(g, shape, p)};
    });
  });
}

// Note [Adaptive pooling windows]
// Output row i of out_h averages input rows [floor(i H / out_h), ceil((i + 1) H / out_h)), and
// likewise for columns (PyTorch's windows; they overlap when H is not a multiple of out_h).
// A window's mean is the mean over its rows of the mean over its columns, so the general case
// pools the rows first (one slice + mean per output row), then the columns. When the sizes divide
// evenly the windows are those of avg_pool2d; 1x1 is a plain mean over (H, W).
Tensor adaptive_avg_pool2d(const Tensor& x_in, std::array<int64_t, 2> out_size) {
  return with_batch("adaptive_avg_pool2d", x_in, [&](const Tensor& x) {
    detail::check_floating("adaptive_avg_pool2d", x);
    const int64_t H = x.size(2), W = x.size(3), oh = out_size[0], ow = out_size[1];
    LOOM_CHECK(oh > 0 && ow > 0, "adaptive_avg_pool2d: output size must be positive, got ",
               pair(out_size));
    LOOM_CHECK(H > 0 && W > 0, "adaptive_avg_pool2d: input ", x.shape(), " has an empty plane");
    if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
    if (H % oh == 0 && W % ow == 0) {
      Pool2dParams p;
      p.kernel = p.stride = {H / oh, W / ow};
      return avg_pool2d(x, p);
    }
    auto pool_dim = [](const Tensor& t, int64_t dim, int64_t in, int64_t out) {
      if (in == out) return t;
      std::vector<Tensor> parts;
      for (int64_t i = 0; i < out; ++i) {
        int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        parts.push_back(mean(slice(t, dim, start, end), {dim}, true));
      }
      return cat(parts, dim);
    };
    return pool_dim(pool_dim(x, 2, H, oh), 3, W, ow);
  });
}

}  // namespace loom
