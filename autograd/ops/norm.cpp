// Differentiable normalisation: batch_norm (fused backend kernels in training; an elementwise
// backward in eval), batch_norm_relu_max_pool2d (batch norm, ReLU and MaxPool2d(2) as one op on
// CUDA). layer_norm is in autograd/ops/layer_norm.cpp.
// Leaves out: group/instance norm, and the modules that own the parameters and running stats (nn/).
#include "autograd/ops/norm.h"

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/conv_pool.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/recompute.h"
#include "kernels/raw_ops.h"

namespace loom {

namespace {

// weight, bias, running stats: undefined, or one value per channel on x's device. same_dtype:
// x's dtype, or float32 for a float16/bfloat16 x (the parameters under autocast).
void check_channel_vector(const Tensor& x, const Tensor& t, const char* what, bool same_dtype) {
  if (!t.defined()) return;
  LOOM_CHECK(t.device() == x.device(), "batch_norm: ", what, " ", describe(t),
             " is not on the device of input ", describe(x));
  LOOM_CHECK(t.dim() == 1 && t.size(0) == x.size(1), "batch_norm: ", what, " ", t.shape(),
             " does not match the ", x.size(1), " channels of input ", x.shape(), " (expected [",
             x.size(1), "])");
  const bool half = x.dtype() == DType::F16 || x.dtype() == DType::BF16;
  if (same_dtype)
    LOOM_CHECK(t.dtype() == x.dtype() || (half && t.dtype() == DType::F32), "batch_norm: ", what,
               " ", describe(t), " and input ", describe(x),
               " have different dtypes (a float16/bfloat16 input also takes float32)");
  else
    detail::check_floating("batch_norm", t);
}

// The per-channel tensors and eps of a batch norm of x.
void check_parameters(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const Tensor& running_mean, const Tensor& running_var, double eps) {
  check_channel_vector(x, weight, "weight", true);
  check_channel_vector(x, bias, "bias", true);
  check_channel_vector(x, running_mean, "running_mean", false);
  check_channel_vector(x, running_var, "running_var", false);
  LOOM_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var must both be given or both be undefined");
  LOOM_CHECK(eps > 0, "batch_norm: eps must be positive, got ", eps);
}

// The shape that broadcasts a (C) vector over x: (1, C, 1, ...).
Shape channel_shape(const Tensor& x) {
  Shape s(size_t(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

// Every dim of x but the channel dim (the dims batch_norm reduces over).
std::vector<int64_t> non_channel_dims(const Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, bool relu) {
  // Under autocast (Note [Autocast policy]) a float16/bfloat16 input stays in its dtype and the
  // float32 weight and bias stay float32: the kernels accumulate the statistics and compute in
  // float32, read the parameters as they are and read and write only the low-precision
  // activations (half the bytes of a float32 round trip, and no cast kernels around the layer:
  // the parameter gradients come back float32 directly). The running statistics stay float32.
  // A float32 input stays float32.
  const std::optional<DType> low = amp::autocast_dtype();
  const bool keep_low = low && x_in.dtype() == *low;
  auto param = [&](const Tensor& t) {
    if (!keep_low) return amp::cast_fp32(t);
    return t.defined() && t.dtype() != DType::F32 ? amp::cast_lower(t) : t;
  };
  const Tensor x = keep_low ? x_in : amp::cast_fp32(x_in);
  const Tensor weight = param(weight_in), bias = param(bias_in);
  detail::check_defined("batch_norm", x);
  detail::check_floating("batch_norm", x);
  LOOM_CHECK(x.dim() >= 2, "batch_norm: expected an input with at least 2 dims (N, C, ...), got ",
             describe(x));
  check_parameters(x, weight, bias, running_mean, running_var, eps);
  Backend& be = backend_for(x.device());
  const bool batch_stats = training || !running_mean.defined();
  if (batch_stats)
    LOOM_CHECK(x.size(1) == 0 || x.numel() / x.size(1) > 1,
               "batch_norm: expected more than 1 value per channel "
               "when using batch statistics, got input ",
               x.shape());

  BatchNormOut o =
      be.batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, relu);
  if (batch_stats) {
    autograd::Saved sx = save(x, "batch_norm"), sw = save(weight, "batch_norm"),
                    sb = save(bias, "batch_norm");
    // y can be made again from what the backward keeps (Note [Recomputed activations]). With
    // the fused ReLU y is saved too, after the recipe is offered (so it may be kept as the
    // recipe): the mask is y > 0 (the CPU and channels-last CUDA read y; NCHW CUDA recomputes
    // the mask from x, weight and bias: Note [ReLU mask from x] in
    // kernels/cuda/cuda_norm_finalize.cuh).
    autograd::offer_recompute("batch_norm", o.y, {x, weight, bias},
                              [sx, sw, sb, mean = o.save_mean, invstd = o.save_invstd, relu] {
                                return backend_for(sx.get().device())
                                    .batch_norm_apply(sx.get(), sw.get(), sb.get(), mean, invstd,
                                                      relu);
                              });
    autograd::Saved sy = relu ? save(o.y, "batch_norm") : autograd::Saved();
    return record("batch_norm", o.y, {x, weight, bias},
                  [sx, sw, sb, sy, mean = o.save_mean, invstd = o.save_invstd](const Tensor& g) {
                    BatchNormGrads r =
                        backend_for(g.device())
                            .batch_norm_backward(g, sx.get(), sw.get(), sb.get(), mean, invstd,
                                                 sy.defined() ? sy.get() : Tensor());
                    return Grads{r.grad_input, r.grad_weight, r.grad_bias};
                  });
  }
  // Eval: y = (x - mean) * invstd * w + b with constant statistics, so the backward is
  // elementwise. The statistics are copied now: later training steps update them in place.
  Tensor rmean = empty({x.size(1)}, {.dtype = x.dtype(), .device = x.device()});
  Tensor var = empty({x.size(1)}, {.dtype = x.dtype(), .device = x.device()});
  be.copy_(rmean, running_mean);
  be.copy_(var, running_var);
  Tensor invstd = be.unary(UnaryOp::Rsqrt, be.binary_scalar(BinaryOp::Add, var, eps, false));
  return record(
      "batch_norm", o.y, {x, weight, bias},
      [sx = save(x, "batch_norm"), sw = save(weight, "batch_norm"),
       sy = relu ? save(o.y, "batch_norm") : autograd::Saved(), rmean, invstd](const Tensor& g_in) {
        const Tensor &x = sx.get(), &w = sw.get();
        const Tensor g =
            sy.defined() ? backend_for(g_in.device()).binary(BinaryOp::ReluBackward, g_in, sy.get())
                         : g_in;
        Shape cs = channel_shape(x);
        Tensor is = invstd.view(cs);
        Grads grads(3);
        if (needs_input_grad(0)) grads[0] = w.defined() ? g * (is * w.view(cs)) : g * is;
        if (needs_input_grad(1))
          grads[1] = sum(g * ((x - rmean.view(cs)) * is), non_channel_dims(x));
        if (needs_input_grad(2)) grads[2] = sum(g, non_channel_dims(x));
        return grads;
      });
}

// Note [Batch norm into max pool] (kernels/cuda/cuda_norm_pool.cu) on CUDA, in training, on an
// NCHW float tensor with even H and W and no autocast; everywhere else the composition, whose
// values it gives (the tests compare the two).
Tensor batch_norm_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  bool training, double momentum, double eps) {
  const bool fuse = x.defined() && x.device().is_cuda() && training && !amp::autocast_dtype() &&
                    x.dim() == 4 && x.size(2) % 2 == 0 && x.size(3) % 2 == 0 && x.size(2) > 0 &&
                    x.size(3) > 0 && x.size(0) * x.size(2) * x.size(3) > 1 &&
                    !raw::is_channels_last(x) && is_floating(x.dtype());
  if (!fuse)
    return max_pool2d(
        batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, true),
        Pool2dParams{});
  check_parameters(x, weight, bias, running_mean, running_var, eps);
  BatchNormOut o =
      backend_for(x.device())
          .batch_norm_relu_max_pool2(x, weight, bias, running_mean, running_var, momentum, eps);
  return record(
      "batch_norm_relu_max_pool2d", o.y, {x, weight, bias},
      [sx = save(x, "batch_norm_relu_max_pool2d"), sw = save(weight, "batch_norm_relu_max_pool2d"),
       sb = save(bias, "batch_norm_relu_max_pool2d"), mean = o.save_mean,
       invstd = o.save_invstd](const Tensor& g) {
        BatchNormGrads r =
            backend_for(g.device())
                .batch_norm_relu_max_pool2_backward(g, sx.get(), sw.get(), sb.get(), mean, invstd);
        return Grads{r.grad_input, r.grad_weight, r.grad_bias};
      });
}

}  // namespace loom
