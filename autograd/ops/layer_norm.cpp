// Differentiable layer norm: layer_norm (one fused backend op per pass, Note [Fused layer norm]),
// its composite of mean, square and rsqrt (the oracle, and what anomaly mode runs), and
// add_layer_norm, the residual add of a pre-norm transformer block and the next layer norm as
// one forward pass (Note [Layer norm with the residual add]).
// Leaves out: the module that owns the parameters (nn/norm.cpp), RMS norm
// (autograd/ops/rms_norm.cpp).
#include <memory>
#include <optional>
#include <utility>

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/norm.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "kernels/backend.h"
#include "kernels/raw_ops.h"

namespace loom {

namespace {

// The inputs of a layer norm, cast as autocast asks (float32) and checked; errors name the op.
struct LayerNormArgs {
  Tensor x, weight, bias;
  std::vector<int64_t> dims;  // the normalised (trailing) dims of x
};

LayerNormArgs layer_norm_args(const char* op, const Tensor& x_in, const Shape& normalized_shape,
                              const Tensor& weight_in, const Tensor& bias_in) {
  LayerNormArgs a{amp::cast_fp32(x_in), amp::cast_fp32(weight_in), amp::cast_fp32(bias_in), {}};
  const Tensor& x = a.x;
  detail::check_defined(op, x);
  detail::check_floating(op, x);
  const int64_t k = int64_t(normalized_shape.size());
  LOOM_CHECK(k >= 1, op, ": normalized_shape must name at least one dim");
  bool tail_matches = x.dim() >= k;
  for (int64_t i = 0; tail_matches && i < k; ++i)
    tail_matches = x.size(x.dim() - k + i) == normalized_shape[i];
  LOOM_CHECK(tail_matches, op, ": input ", x.shape(), " does not end with normalized_shape ",
             normalized_shape);
  for (const Tensor* t : {&a.weight, &a.bias}) {
    if (!t->defined()) continue;
    const char* what = t == &a.weight ? "weight" : "bias";
    detail::check_pair(op, x, *t);
    LOOM_CHECK(t->shape() == normalized_shape, op, ": ", what, " ", t->shape(),
               " should have normalized_shape ", normalized_shape);
  }
  for (int64_t i = 0; i < k; ++i) a.dims.push_back(x.dim() - k + i);
  return a;
}

// Whether the fused kernels take these arguments: float32/float64 x (after autocast's cast), and
// not anomaly mode (which runs one op per step so that an anomaly is named precisely).
bool fused_applies(const LayerNormArgs& a) {
  return !autograd::is_anomaly_enabled() && (a.x.dtype() == kF32 || a.x.dtype() == kF64);
}

// The residual add's input gradient in the branch's 16-bit dtype, written by the layer norm's
// backward beside the float32 one (Note [Layer norm with the residual add]); `of` is the gradient
// it is a copy of. Set by the layer norm's backward, used and cleared by the add's.
struct LowGrad {
  DType dtype;
  Tensor of, low;
};

// y's autograd node over o (from the backend on x2 = a.x as (M, N) rows): the backward reads the
// saved x2 (the normalised input), mean and rstd, adds the pending gradient of its input (Note
// [Taking the pending gradient]) and, with `twin`, also writes dx in twin->dtype. y gets a.x's
// shape.
Tensor record_layer_norm(const LayerNormArgs& a, const Tensor& x2, const LayerNormOut& o,
                         const Shape& normalized_shape, std::shared_ptr<LowGrad> twin = nullptr) {
  return record(
      "layer_norm", o.y.view(a.x.shape()), {a.x, a.weight, a.bias},
      [sx = save(x2, "layer_norm"),
       w = a.weight.defined() ? a.weight.detach().reshape({-1}) : Tensor(), mean = o.mean,
       rstd = o.rstd, shape = a.x.shape(), normalized_shape, has_w = a.weight.defined(),
       has_b = a.bias.defined(), twin](const Tensor& g) {
        const Tensor& x = sx.get();
        Tensor g2 = raw::contiguous(g).view(x.shape());
        // The residual stream's other gradients, added as dx is written; undefined when there
        // are none.
        const Tensor more =
            needs_input_grad(0) ? autograd::take_pending_grad(0, x.dtype()) : Tensor();
        LayerNormBackwardExtras extras{more.defined() ? more.view(x.shape()) : Tensor(),
                                       twin ? std::optional<DType>(twin->dtype) : std::nullopt};
        LayerNormGrads r =
            backend_for(g.device()).layer_norm_backward(g2, x, w, mean, rstd, has_w, has_b, extras);
        Tensor gx = r.grad_input.view(shape);
        if (twin) twin->of = gx, twin->low = r.grad_input_low.view(shape);
        return Grads{gx, has_w ? r.grad_weight.view(normalized_shape) : Tensor(),
                     has_b ? r.grad_bias.view(normalized_shape) : Tensor()};
      });
}

// The backend's layer norm of a.x as (M, N) rows, with `extras`.
LayerNormOut run_layer_norm(const LayerNormArgs& a, const Tensor& x2, double eps,
                            const LayerNormExtras& extras) {
  Tensor w = a.weight.defined() ? a.weight.detach().reshape({-1}) : Tensor();
  Tensor b = a.bias.defined() ? a.bias.detach().reshape({-1}) : Tensor();
  return backend_for(x2.device()).layer_norm(x2, w, b, eps, extras);
}

// (M, N) rows of x: N the product of the normalised dims.
Tensor rows_of(const Tensor& x, const Shape& normalized_shape) {
  const int64_t N = numel(normalized_shape), M = N == 0 ? 0 : x.numel() / N;
  return raw::contiguous(x.detach()).view({M, N});
}

Tensor cast_to(const Tensor& y, std::optional<DType> dtype) {
  return dtype && *dtype != y.dtype() ? y.to(*dtype) : y;
}

}  // namespace

Tensor layer_norm_composite(const Tensor& x_in, const Shape& normalized_shape,
                            const Tensor& weight_in, const Tensor& bias_in, double eps) {
  LayerNormArgs a = layer_norm_args("layer_norm", x_in, normalized_shape, weight_in, bias_in);
  // Biased variance, as PyTorch: mean of squared deviations.
  Tensor centered = a.x - mean(a.x, a.dims, true);
  Tensor y = centered * rsqrt(mean(square(centered), a.dims, true) + eps);
  if (a.weight.defined()) y = y * a.weight;
  if (a.bias.defined()) y = y + a.bias;
  return y;
}

// Note [Fused layer norm]
// The composite runs about eight kernels forward (mean, subtract, square, mean, add, rsqrt, two
// multiplies, the bias) and as many backward, each a pass over x; a GPT block has two layer norms
// over (B T, C). The fused op reads x as (M, N) rows, N the product of the normalised dims, and
// runs one backend call forward (y, and the rows' mean and rstd saved for backward) and one
// backward (dx, and grad_weight and grad_bias as column sums in a fixed order). float16 and
// bfloat16 inputs under autocast are cast to float32 first (autocast's rule for layer_norm), so
// the fused op sees float32 or float64 and returns what the composite returns; outside autocast
// they run the composite in their own dtype. y_dtype writes y in that dtype in the same pass (a
// following Linear's autocast dtype: the cast it would make, fused); its gradient is then read in
// that dtype too.
Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps, std::optional<DType> y_dtype) {
  LayerNormArgs a = layer_norm_args("layer_norm", x_in, normalized_shape, weight_in, bias_in);
  if (!fused_applies(a))
    return cast_to(layer_norm_composite(x_in, normalized_shape, weight_in, bias_in, eps), y_dtype);
  const Tensor x2 = rows_of(a.x, normalized_shape);
  LayerNormOut o = run_layer_norm(a, x2, eps, LayerNormExtras{.residual = {}, .y_dtype = y_dtype});
  return record_layer_norm(a, x2, o, normalized_shape);
}

// Note [Layer norm with the residual add]
// A pre-norm transformer block adds its attention output to the residual stream, r = x + branch
// (float32 under autocast: branch is bfloat16, x float32), and normalises r for the MLP, whose
// Linear casts the (float32) result to bfloat16. Composed that is three passes over (B T, C):
// the add (reads x and branch, writes r), the layer norm (reads r, writes y), the cast (reads y,
// writes the 16-bit copy). add_layer_norm is one: the kernel reads x and branch, writes r and y
// (in y_dtype). Autograd still sees the two ops it computed: r is an "add" node (its backward
// hands the gradient to x, and to branch in branch's dtype) and y a layer_norm node reading r,
// so values and gradients are the composite's. GPT-2 124M at B 16, T 1024 runs it 24 times a step.
// Backward, composed, is three passes too: the layer norm's dx, the engine's sum of that and the
// gradient the next residual add sent r, and the add's cast of the sum to branch's bfloat16. The
// layer norm's backward runs after every other user of r (it was recorded right after r, and the
// engine runs the latest node first), so it takes that sum (Note [Taking the pending gradient])
// and writes r's whole gradient, in float32 and, beside it, in branch's dtype; the add's backward
// hands that copy to branch when its gradient is the very tensor the layer norm wrote (else it
// casts). One pass instead of three.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x_in, const Tensor& branch,
                                         const Shape& normalized_shape, const Tensor& weight_in,
                                         const Tensor& bias_in, double eps,
                                         std::optional<DType> y_dtype) {
  LayerNormArgs a = layer_norm_args("add_layer_norm", x_in, normalized_shape, weight_in, bias_in);
  detail::check_defined("add_layer_norm", branch, "branch");
  LOOM_CHECK(branch.shape() == a.x.shape() && branch.device() == a.x.device() &&
                 is_floating(branch.dtype()),
             "add_layer_norm: branch ", describe(branch), " should be floating and shaped like x ",
             describe(a.x));
  const bool readable = branch.dtype() == a.x.dtype() || branch.dtype() == kBF16 ||
                        branch.dtype() == kF16;  // the kernel's residual types
  if (!fused_applies(a) || !readable) {
    Tensor r = x_in + branch;
    return {r, layer_norm(r, normalized_shape, weight_in, bias_in, eps, y_dtype)};
  }
  const Tensor x2 = rows_of(a.x, normalized_shape);
  LayerNormOut o = run_layer_norm(
      a, x2, eps,
      LayerNormExtras{.residual = rows_of(branch, normalized_shape), .y_dtype = y_dtype});
  std::shared_ptr<LowGrad> twin;
  if (branch.dtype() != a.x.dtype())
    twin = std::make_shared<LowGrad>(LowGrad{branch.dtype(), {}, {}});
  Tensor r = record("add", o.sum.view(a.x.shape()), {a.x, branch},
                    [bdt = branch.dtype(), twin](const Tensor& g) {
                      Tensor low;
                      if (twin && twin->of.defined() && g.impl() == twin->of.impl())
                        low = twin->low;  // the layer norm's copy of this very gradient
                      if (twin) twin->of = Tensor(), twin->low = Tensor();
                      return Grads{g, low.defined() ? low : raw::cast(g, bdt)};
                    });
  LayerNormArgs on_r = a;
  on_r.x = r;
  return {r, record_layer_norm(on_r, o.sum, o, normalized_shape, twin)};
}

}  // namespace loom
