// Adam/AdamW's step: count the step, then fused buckets go to adam_step_ (autograd/ops/optim.h)
// and the rest (and fused = false) run the same formula with tensor ops under NoGradGuard.
// Leaves out: sparse gradients.
#include "nn/optim/adam.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/optim.h"

namespace loom::optim {

namespace {
void check_options(const char* name, const AdamOptions& o) {
  LOOM_CHECK(o.lr >= 0.0, name, ": learning rate ", o.lr, " is negative");
  LOOM_CHECK(o.eps >= 0.0, name, ": eps ", o.eps, " is negative");
  LOOM_CHECK(
      o.betas.first >= 0.0 && o.betas.first < 1.0 && o.betas.second >= 0.0 && o.betas.second < 1.0,
      name, ": betas (", o.betas.first, ", ", o.betas.second, ") must be in [0, 1)");
  LOOM_CHECK(o.weight_decay >= 0.0, name, ": weight_decay ", o.weight_decay, " is negative");
}

AdamOptions from_adamw(const AdamWOptions& w) {
  return AdamOptions{w.lr, w.betas, w.eps, w.weight_decay, w.amsgrad, w.fused};
}
}  // namespace

Adam::Adam(std::string name, bool decoupled)
    : OptimizerWithOptions(std::move(name)), decoupled_(decoupled) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam("Adam", false) {
  add_param_group(std::move(params), options);
}

void Adam::add_param_group(std::vector<Tensor> params, AdamOptions options) {
  check_options(name().c_str(), options);
  add_group(std::move(params), options);
}

std::unique_ptr<Optimizer> Adam::make_like(std::vector<std::vector<Tensor>> groups) const {
  LOOM_CHECK(groups.size() == options_.size(), name(), ".make_like: ", groups.size(),
             " groups given, this optimizer has ", options_.size());
  std::unique_ptr<Adam> out(new Adam(name(), decoupled_));  // AdamW is Adam with decoupled_
  for (size_t g = 0; g < groups.size(); ++g)
    out->add_param_group(std::move(groups[g]), options_[g]);
  return out;
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : Adam("AdamW", true) {
  add_param_group(std::move(params), options);
}

void AdamW::add_param_group(std::vector<Tensor> params, AdamWOptions options) {
  Adam::add_param_group(std::move(params), from_adamw(options));
}

std::vector<std::string> Adam::buffer_names(size_t g) const {
  if (options_[g].amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

// The same formula as AdamMath (kernels/optim_math.h), one tensor op at a time.
void Adam::step_composite(size_t i, const AdamOptions& o, const Tensor& grad_scale) {
  Tensor p = param(i);
  ParamState& st = state_of(i);
  Tensor g = p.grad();
  if (grad_scale.defined()) g = g * grad_scale.to(g.dtype());
  auto [beta1, beta2] = o.betas;
  if (o.weight_decay != 0.0) {
    if (decoupled_)
      p.mul_(1.0 - o.lr * o.weight_decay);
    else
      g = g + p * o.weight_decay;
  }
  Tensor &m = st.buffers[0], &v = st.buffers[1];
  m.add_(g - m, 1.0 - beta1);
  v.mul_(beta2);
  v.add_(g * g, 1.0 - beta2);
  Tensor vhat = v;
  if (o.amsgrad) {
    st.buffers[2].copy_(maximum(st.buffers[2], v));
    vhat = st.buffers[2];
  }
  double bc1 = 1.0 - std::pow(beta1, double(st.step));
  double bc2 = 1.0 - std::pow(beta2, double(st.step));
  Tensor denom = sqrt(vhat) / std::sqrt(bc2) + o.eps;
  p.add_(m / denom, -(o.lr / bc1));
}

void Adam::step() {
  NoGradGuard guard;
  const Tensor grad_scale = take_grad_scale();  // Note [Clipping inside the update]
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const AdamOptions& o = options_[g];
    size_t nbuf = buffer_names(g).size();
    // Count this step first, so parameters bucket by the step number their update uses. A
    // capturable optimizer counts on the device (Note [Capturable optimizer]): one bucket.
    const DeviceStepScalars on_device = device_scalars(g);
    auto buckets = buckets_with_grad(g, [&](size_t i) -> int64_t {
      ParamState& st = state_of(i);
      if (on_device.defined()) {
        LOOM_CHECK(st.buffers.size() == nbuf, name(), ".step: parameter \"", param(i).name(),
                   "\" has no state; a capturable optimizer creates it in make_capturable()");
        return 0;
      }
      if (st.buffers.empty())
        for (size_t b = 0; b < nbuf; ++b) st.buffers.push_back(zeros_like(param(i)));
      return ++st.step;
    });
    for (const auto& bucket : buckets) {
      if (!o.fused || !bucket.fusable) {
        for (size_t i : bucket.index) step_composite(i, o, grad_scale);
        continue;
      }
      std::vector<Tensor> ps, gs, ms, vs, vmaxs;
      for (size_t i : bucket.index) {
        const ParamState& st = state_of(i);
        ps.push_back(param(i));
        gs.push_back(param(i).grad().contiguous());
        ms.push_back(st.buffers[0]);
        vs.push_back(st.buffers[1]);
        if (o.amsgrad) vmaxs.push_back(st.buffers[2]);
      }
      adam_step_(ps, gs, ms, vs, vmaxs,
                 {.lr = o.lr,
                  .beta1 = o.betas.first,
                  .beta2 = o.betas.second,
                  .eps = o.eps,
                  .weight_decay = o.weight_decay,
                  .decoupled_weight_decay = decoupled_,
                  .amsgrad = o.amsgrad,
                  .step = state_of(bucket.index[0]).step,
                  .on_device = on_device,
                  .grad_scale = grad_scale});
    }
  }
}

}  // namespace loom::optim
