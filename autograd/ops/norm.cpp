// Differentiable normalisation: batch_norm (fused backend kernels in training; an elementwise
// backward in eval), batch_norm_add_relu (a residual block's end as one op),
// batch_norm_relu_max_pool2d (batch norm, ReLU and MaxPool2d(2) as one op on
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

namespace {

// The inputs of a batch norm as its kernels take them, checked.
struct BnInputs {
  Tensor x, weight, bias;
};

BnInputs bn_inputs(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                   const Tensor& running_mean, const Tensor& running_var, bool training,
                   double eps) {
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
  BnInputs in{keep_low ? x_in : amp::cast_fp32(x_in), param(weight_in), param(bias_in)};
  const Tensor& x = in.x;
  detail::check_defined("batch_norm", x);
  detail::check_floating("batch_norm", x);
  LOOM_CHECK(x.dim() >= 2, "batch_norm: expected an input with at least 2 dims (N, C, ...), got ",
             describe(x));
  check_parameters(x, in.weight, in.bias, running_mean, running_var, eps);
  if (training || !running_mean.defined())
    LOOM_CHECK(x.size(1) == 0 || x.numel() / x.size(1) > 1,
               "batch_norm: expected more than 1 value per channel "
               "when using batch statistics, got input ",
               x.shape());
  return in;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, bool relu) {
  const BnInputs in = bn_inputs(x_in, weight_in, bias_in, running_mean, running_var, training, eps);
  const Tensor &x = in.x, &weight = in.weight, &bias = in.bias;
  Backend& be = backend_for(x.device());
  const bool batch_stats = training || !running_mean.defined();
  BatchNormOut o =
      be.batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, relu);
  if (batch_stats) {
    autograd::Saved sx = save(x, "batch_norm"), sw = save(weight, "batch_norm"),
                    sb = save(bias, "batch_norm");
    // y can be made again from what the backward keeps (Note [Recomputed activations]). With
    // the fused ReLU y is saved too, after the recipe is offered (so it may be kept as the
    // recipe): the mask is y > 0 (the CPU and channels-last CUDA read y; NCHW CUDA recomputes
    // the mask from x, weight and bias: Note [ReLU mask from x] in
    // kernels/cuda/norm/cuda_batch_norm_finalize.cuh).
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

// Note [Batch norm's fusions]
// A ResNet runs every batch norm in training as its own passes over the activation (statistics,
// then normalise), after a cuDNN convolution. What loom fuses, and what it does not:
// - The ReLU after a batch norm: in the normalising pass (batch_norm's relu), and its mask in the
//   backward's passes.
// - A residual block's end, relu(bn(x) + shortcut): batch_norm_add_relu below adds the shortcut
//   and applies the ReLU in the normalising pass: one pass that reads x and the shortcut and
//   writes y, where the three ops wrote and read two more full-size tensors (the sum, and the
//   ReLU's input again). Its backward masks the gradient once (a pass that also is the
//   shortcut's gradient) and runs batch norm's backward on it: the passes the three ops made.
//   On ResNet-50 (bf16, batch 64, one H200): 16 such ends per step.
// - Batch norm + ReLU + MaxPool2d(2) for NCHW float32 (batch_norm_relu_max_pool2d, below).
// - Not the convolution and the batch norm. cuDNN's graph API describes both halves: the batch
//   statistics as a GEN_STATS node after the convolution, and the normalise + ReLU of the previous
//   layer as the convolution's prologue (its ConvBNfprop pattern). Asked on an H200 with cuDNN 9
//   (tests/kernels/cuda/conv/test_cuda_conv_genstats.cpp), it offers conv + statistics only through
//   an engine compiled at run time, about 1 s per shape, and that engine ran a ResNet-50 layer3
//   convolution in 0.060 ms against 0.029 for the convolution alone (whose statistics pass costs
//   about 0.01 more); for the prologue it offers no engine at all. So the two stay apart.
Tensor batch_norm_add_relu(const Tensor& x_in, const Tensor& residual_in, const Tensor& weight_in,
                           const Tensor& bias_in, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  auto composite = [&] {
    return relu(
        batch_norm(x_in, weight_in, bias_in, running_mean, running_var, training, momentum, eps) +
        residual_in);
  };
  detail::check_defined("batch_norm_add_relu", residual_in);
  const bool batch_stats = training || !running_mean.defined();
  if (autograd::is_anomaly_enabled() || !batch_stats) return composite();
  const BnInputs in = bn_inputs(x_in, weight_in, bias_in, running_mean, running_var, training, eps);
  const Tensor &x = in.x, &weight = in.weight, &bias = in.bias;
  // The shortcut in x's dtype (autocast's: both come from its convolutions) and shape; anything
  // else (a float32 shortcut under autocast, a broadcast one) promotes or broadcasts as `+` does.
  const Tensor& r = residual_in;
  if (r.dtype() != x.dtype() || r.shape() != x.shape() || r.device() != x.device())
    return composite();
  BatchNormOut o = backend_for(x.device())
                       .batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
                                   eps, /*relu=*/true, r);
  return record("batch_norm_add_relu", o.y, {x, weight, bias, r},
                [sx = save(x, "batch_norm_add_relu"), sw = save(weight, "batch_norm_add_relu"),
                 sb = save(bias, "batch_norm_add_relu"), sy = save(o.y, "batch_norm_add_relu"),
                 mean = o.save_mean, invstd = o.save_invstd](const Tensor& g) {
                  Backend& be = backend_for(g.device());
                  // The ReLU's gradient, which is also the shortcut's.
                  Tensor gs = be.binary(BinaryOp::ReluBackward, g, sy.get());
                  BatchNormGrads r =
                      be.batch_norm_backward(gs, sx.get(), sw.get(), sb.get(), mean, invstd);
                  return Grads{r.grad_input, r.grad_weight, r.grad_bias, gs};
                });
}

// Note [Batch norm into max pool] (kernels/cuda/norm/cuda_batch_norm_pool.cu) on CUDA, in training,
// on an NCHW float tensor with even H and W and no autocast; everywhere else the composition, whose
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
