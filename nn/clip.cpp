// clip_grad_norm_: the total norm of the gradients, then an in-place scale by the clamped
// coefficient (always applied, so there is no data-dependent host branch). The 2-norm of
// float32/float64 gradients on one device is fused (Note [Fused gradient norm] in
// kernels/backend_methods.inc: one sum of squares over the whole list, one scale over it); other
// norms and dtypes run the composite (one norm per gradient, the norm of those norms), which is
// also the fused path's test oracle. Leaves out: gradients spread over several devices.
#include "nn/clip.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "kernels/backend.h"

namespace loom::nn {

namespace {

// The gradients of `params` that exist, all on one device (an error names both devices).
std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  for (const auto& g : grads)
    LOOM_CHECK(g.device() == grads[0].device(), "clip_grad_norm_: gradients on several devices (",
               grads[0].device(), " and ", g.device(), ") are not supported");
  return grads;
}

void check_args(double max_norm, double norm_type) {
  LOOM_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type ", norm_type, " must be positive");
  LOOM_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm ", max_norm, " is negative");
}

// min(1, max_norm / (total + 1e-6)), computed on the device in g's dtype.
Tensor coefficient(const Tensor& total, double max_norm, const Tensor& g) {
  return minimum(rdiv(total + 1e-6, max_norm),
                 scalar_tensor(1.0, {.dtype = g.dtype(), .device = g.device()}));
}

// Raises on a NaN or infinite total (one host sync) when asked; then every gradient *= coef =
// min(1, max_norm / (total + 1e-6)), computed on the device.
void clip_by(const std::vector<Tensor>& grads, const Tensor& total, double max_norm,
             bool error_if_nonfinite, bool fused) {
  if (error_if_nonfinite) {
    double t = total.item();
    LOOM_CHECK(std::isfinite(t), "clip_grad_norm_: the total norm of the gradients is ", t,
               "; pass error_if_nonfinite = false to clip anyway");
  }
  Tensor coef = coefficient(total, max_norm, grads[0]);
  if (fused) return backend_for(coef.device()).scale_by_(grads, coef);
  for (Tensor g : grads) g.mul_(coef.to(g.dtype()));  // a handle: the same storage
}

bool fusable(const std::vector<Tensor>& grads, double norm_type) {
  if (norm_type != 2.0) return false;
  for (const auto& g : grads)
    if (g.dtype() != grads[0].dtype() || (g.dtype() != kF32 && g.dtype() != kF64) ||
        !g.is_contiguous())
      return false;
  return true;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  check_args(max_norm, norm_type);
  NoGradGuard guard;
  std::vector<Tensor> grads = grads_of(params);
  if (grads.empty()) return scalar_tensor(0.0);
  if (!fusable(grads, norm_type))
    return clip_grad_norm_composite(params, max_norm, norm_type, error_if_nonfinite);
  Tensor total = sqrt(backend_for(grads[0].device()).sum_of_squares(grads));
  clip_by(grads, total, max_norm, error_if_nonfinite, /*fused=*/true);
  return total;
}

std::optional<ClipCoefficient> clip_coefficient(const std::vector<Tensor>& params,
                                                double max_norm) {
  check_args(max_norm, 2.0);
  NoGradGuard guard;
  std::vector<Tensor> grads = grads_of(params);
  if (grads.empty() || !fusable(grads, 2.0)) return std::nullopt;
  Tensor total = sqrt(backend_for(grads[0].device()).sum_of_squares(grads));
  return ClipCoefficient{total, coefficient(total, max_norm, grads[0])};
}

Tensor clip_grad_norm_sharded_(const std::vector<Tensor>& grads, double max_norm, DType dtype,
                               Device device, const std::function<void(Tensor&)>& sum_over_ranks) {
  check_args(max_norm, 2.0);
  NoGradGuard guard;
  LOOM_CHECK(grads.empty() || fusable(grads, 2.0),
             "clip_grad_norm_sharded_: the gradients must be contiguous float32 or float64 of one "
             "dtype, got ",
             describe(grads[0]));
  Tensor sq = grads.empty() ? zeros({}, {.dtype = dtype, .device = device})
                            : backend_for(device).sum_of_squares(grads);
  sum_over_ranks(sq);
  Tensor total = sqrt(sq);
  if (!grads.empty()) clip_by(grads, total, max_norm, false, /*fused=*/true);
  return total;
}

ClipCoefficient split_clip_coefficient(const std::vector<Tensor>& counted, double max_norm,
                                       DType dtype, Device device,
                                       const std::function<void(Tensor&)>& sum_over_ranks) {
  check_args(max_norm, 2.0);
  NoGradGuard guard;
  std::vector<Tensor> grads = grads_of(counted);
  Tensor sq = zeros({}, {.dtype = dtype, .device = device});
  if (!grads.empty() && fusable(grads, 2.0))
    sq = backend_for(device).sum_of_squares(grads).to(dtype);
  else
    for (const Tensor& g : grads) sq = sq + sum(g.to(dtype) * g.to(dtype));
  sum_over_ranks(sq);
  Tensor total = sqrt(sq);
  return {total, minimum(rdiv(total + 1e-6, max_norm),
                         scalar_tensor(1.0, {.dtype = dtype, .device = device}))};
}

Tensor clip_grad_norm_composite(const std::vector<Tensor>& params, double max_norm,
                                double norm_type, bool error_if_nonfinite) {
  check_args(max_norm, norm_type);
  NoGradGuard guard;
  std::vector<Tensor> grads = grads_of(params);
  if (grads.empty()) return scalar_tensor(0.0);
  const DType dt = grads[0].dtype();
  const bool inf = std::isinf(norm_type);
  std::vector<Tensor> norms;
  for (const auto& g : grads) {
    Tensor a = abs(g.to(dt));
    norms.push_back(inf ? max(a) : pow(sum(pow(a, norm_type)), 1.0 / norm_type));
  }
  Tensor all = stack(norms);
  Tensor total = inf ? max(all) : pow(sum(pow(all, norm_type)), 1.0 / norm_type);
  clip_by(grads, total, max_norm, error_if_nonfinite, /*fused=*/false);
  return total;
}

}  // namespace loom::nn
