// clip_grad_norm_: one norm per gradient, the norm of those norms, then an in-place scale by
// the clamped coefficient (always applied, so there is no data-dependent host branch).
// Leaves out: gradients spread over several devices (they must share one).
#include "nn/clip.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"

namespace loom::nn {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  LOOM_CHECK(norm_type > 0.0, "clip_grad_norm_: norm_type ", norm_type, " must be positive");
  LOOM_CHECK(max_norm >= 0.0, "clip_grad_norm_: max_norm ", max_norm, " is negative");
  NoGradGuard guard;
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return scalar_tensor(0.0);
  Device dev = grads[0].device();
  DType dt = grads[0].dtype();
  bool inf = std::isinf(norm_type);
  std::vector<Tensor> norms;
  for (const auto& g : grads) {
    LOOM_CHECK(g.device() == dev, "clip_grad_norm_: gradients on several devices (", dev, " and ",
               g.device(), ") are not supported");
    Tensor a = abs(g.to(dt));
    norms.push_back(inf ? max(a) : pow(sum(pow(a, norm_type)), 1.0 / norm_type));
  }
  Tensor all = stack(norms);
  Tensor total = inf ? max(all) : pow(sum(pow(all, norm_type)), 1.0 / norm_type);
  if (error_if_nonfinite) {
    double t = total.item();
    LOOM_CHECK(std::isfinite(t), "clip_grad_norm_: the total norm of the gradients is ", t,
               "; pass error_if_nonfinite = false to clip anyway");
  }
  // coef = min(1, max_norm / (total + 1e-6)), applied to every gradient.
  Tensor coef =
      minimum(rdiv(total + 1e-6, max_norm), scalar_tensor(1.0, {.dtype = dt, .device = dev}));
  for (auto& g : grads) g.mul_(coef.to(g.dtype()));
  return total;
}

}  // namespace loom::nn
