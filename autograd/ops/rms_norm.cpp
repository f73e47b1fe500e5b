// Differentiable RMS norm, Llama's normalisation: rms_norm, one fused backend op forward and one
// backward (Note [RMS norm]), and rms_norm_composite, the same from to, square, mean, rsqrt and
// mul with autograd: the fused op's test oracle, and what anomaly mode runs.
// Leaves out: the module that owns the weight (nn/), a bias (RMSNorm has none), normalising over
// more than the last dim, and the residual add that add_layer_norm fuses.
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

// Note [RMS norm]
// Llama normalises each row of the residual stream (B, T, C) by its root mean square, with a
// learned weight and no bias and no mean subtraction. Hugging Face's LlamaRMSNorm, which Llama's
// checkpoints were trained and are evaluated with, computes
//   h = x.to(float32);  h = h * rsqrt(mean(h^2, -1) + eps);  y = weight * h.to(x.dtype)
// so the statistics and the normalisation are float32 even for a bfloat16 x, the normalised row is
// rounded to x's dtype, and only then multiplied by the weight; y has the promoted dtype of the two
// (a float32 weight with a bfloat16 x gives a float32 y). rms_norm computes exactly that:
//   - composite: to, square, mean, add, rsqrt, mul, to, mul: eight kernels forward, as many
//     backward, each a pass over (B T, C);
//   - fused: one backend call forward (y, and each row's rstd saved, float32), one backward (dx
//     from dy, x, w and rstd; grad_weight as column sums of dy * round(x rstd) over the rows in a
//     fixed order, so deterministic). The backward computes dx in float32 and rounds it once,
//     where the composite rounds dy * w to y's dtype first: the two differ by that rounding.
// Under autocast rms_norm is on the float32 list with layer_norm (Note [Autocast policy] in
// autograd/amp/autocast.h): a bfloat16 x is cast to float32 first, the whole op runs in float32 and
// y is float32 (the next Linear casts it down). Outside autocast a bfloat16 model (x and weight
// bfloat16) gets Hugging Face's values: float32 inside the kernel, bfloat16 in and out.
namespace {

constexpr const char* kOp = "rms_norm";

// The inputs of an RMS norm, cast as autocast asks (float32) and checked; errors name the op.
struct RmsNormArgs {
  Tensor x, weight;
};

RmsNormArgs rms_norm_args(const Tensor& x_in, const Tensor& weight_in) {
  RmsNormArgs a{amp::cast_fp32(x_in), amp::cast_fp32(weight_in)};
  const Tensor &x = a.x, &w = a.weight;
  detail::check_defined(kOp, x);
  detail::check_floating(kOp, x);
  LOOM_CHECK(x.dim() >= 1, kOp, ": input ", describe(x), " needs at least one dim to normalise");
  if (!w.defined()) return a;
  const bool x16 = x.dtype() == DType::F16 || x.dtype() == DType::BF16;
  LOOM_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), kOp, ": weight ", describe(w), " should be (",
             x.size(-1), "), the last dim of input ", describe(x));
  LOOM_CHECK(w.device() == x.device(), kOp, ": weight ", describe(w),
             " is not on the device of input ", describe(x));
  LOOM_CHECK(w.dtype() == x.dtype() || (x16 && w.dtype() == DType::F32), kOp, ": weight ",
             describe(w), " should have input's dtype (or float32 for a 16-bit input); input ",
             describe(x));
  return a;
}

}  // namespace

Tensor rms_norm_composite(const Tensor& x_in, const Tensor& weight_in, double eps) {
  RmsNormArgs a = rms_norm_args(x_in, weight_in);
  const Tensor xf = to(a.x, rms_norm_stat_dtype(a.x.dtype()));  // float32 for a 16-bit x
  const Tensor h = to(xf * rsqrt(mean(square(xf), {xf.dim() - 1}, true) + eps), a.x.dtype());
  if (!a.weight.defined()) return h;
  return a.weight * to(h, a.weight.dtype());  // the promotion: y in the weight's dtype
}

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  RmsNormArgs a = rms_norm_args(x_in, weight_in);
  // Anomaly mode runs one op per step, so that an anomaly is named precisely.
  if (autograd::is_anomaly_enabled()) return rms_norm_composite(x_in, weight_in, eps);
  const int64_t N = a.x.size(-1), M = N == 0 ? 0 : a.x.numel() / N;
  const Tensor x2 = raw::contiguous(a.x.detach()).view({M, N});  // (M, N) rows
  const Tensor w = a.weight.defined() ? raw::contiguous(a.weight.detach()) : Tensor();
  RmsNormOut o = backend_for(x2.device()).rms_norm(x2, w, eps);
  return record(kOp, o.y.view(a.x.shape()), {a.x, a.weight},
                [sx = save(x2, kOp), w, rstd = o.rstd, shape = a.x.shape()](const Tensor& g) {
                  const Tensor& x = sx.get();
                  const Tensor g2 = raw::contiguous(g).view(x.shape());
                  const bool need_w = w.defined() && needs_input_grad(1);
                  RmsNormGrads r =
                      backend_for(g.device()).rms_norm_backward(g2, x, w, rstd, need_w);
                  return Grads{r.grad_input.view(shape), r.grad_weight};
                });
}

}  // namespace loom
