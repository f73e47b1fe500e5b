// GradScaler (Note [GradScaler] in nn/amp/grad_scaler.h): the device-side state, the calls to
// the fused unscale and scale-update ops, and the state_dict a checkpoint holds.
// Leaves out: the kernels (kernels/cpu/cpu_amp.cpp, kernels/cuda/elementwise/cuda_amp.cu).
#include "nn/amp/grad_scaler.h"

#include <cstdint>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/optim.h"
#include "autograd/ops/shape.h"

namespace loom::amp {

GradScaler::GradScaler(GradScalerOptions o) : options_(o), pending_scale_(o.init_scale) {
  LOOM_CHECK(o.init_scale > 0.0, "GradScaler: init_scale must be positive, got ", o.init_scale);
  LOOM_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be above 1, got ",
             o.growth_factor);
  LOOM_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
             "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  LOOM_CHECK(o.growth_interval >= 1 && o.growth_interval <= INT32_MAX,
             "GradScaler: growth_interval must be in [1, 2^31), got ", o.growth_interval);
}

void GradScaler::place_state(const Device& device) {
  if (scale_.defined()) {
    LOOM_CHECK(scale_.device() == device, "GradScaler: its state is on ", scale_.device(),
               " but this loss is on ", device, " (one scaler per device)");
    return;
  }
  scale_ = full({1}, pending_scale_, {.dtype = DType::F32, .device = device});
  growth_tracker_ = full({1}, double(pending_tracker_), {.dtype = DType::I32, .device = device});
  found_inf_ = zeros({1}, {.dtype = DType::F32, .device = device});
  skipped_on_device_ = zeros({1}, {.dtype = DType::F32, .device = device});
}

Tensor GradScaler::scale(const Tensor& loss) {
  LOOM_CHECK(loss.defined(), "GradScaler::scale: the loss is undefined");
  if (!options_.enabled) return loss;
  place_state(loss.device());
  Tensor s = reshape(scale_, {});
  if (loss.dtype() != DType::F32) s = to(s, loss.dtype());
  return loss * s;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  LOOM_CHECK(scale_.defined(), "GradScaler::unscale_: call scale(loss) (and backward) first");
  LOOM_CHECK(!unscaled_,
             "GradScaler::unscale_: already called since the last update() (once per step)");
  std::vector<Tensor> grads;
  for (const Tensor& p : opt.all_params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    LOOM_CHECK(g.device() == scale_.device(), "GradScaler::unscale_: gradient of ", describe(p),
               " is on ", g.device(), " but the scaler's state is on ", scale_.device());
    LOOM_CHECK(g.is_contiguous(), "GradScaler::unscale_: gradient of ", describe(p),
               " is not contiguous");
    grads.push_back(g);
  }
  NoGradGuard no_grad;
  amp_unscale_(grads, found_inf_, scale_);
  opt.sum_over_shards(found_inf_);  // ZeRO: an inf in any rank's shard skips the step everywhere
  unscaled_ = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  if (!unscaled_) unscale_(opt);
  if (opt.capturable()) {  // decided on the device: no host read (Note [GradScaler])
    opt.step_unless(found_inf_);
    NoGradGuard no_grad;
    skipped_on_device_.add_(found_inf_);
    return true;
  }
  if (found_inf_.item() != 0.0) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled || !scale_.defined()) return;
  NoGradGuard no_grad;
  amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                    options_.backoff_factor, options_.growth_interval);
  found_inf_.fill_(0.0);
  unscaled_ = false;
}

double GradScaler::get_scale() const { return scale_.defined() ? scale_.item() : pending_scale_; }

int64_t GradScaler::skipped_steps() const {
  return skipped_ + (skipped_on_device_.defined() ? int64_t(skipped_on_device_.item()) : 0);
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? int64_t(growth_tracker_.item()) : pending_tracker_;
}

nn::StateDict GradScaler::state_dict() const {
  return {{"scale", nn::scalar_entry(get_scale())},
          {"growth_tracker", nn::scalar_entry(double(growth_tracker()))},
          {"growth_factor", nn::scalar_entry(options_.growth_factor)},
          {"backoff_factor", nn::scalar_entry(options_.backoff_factor)},
          {"growth_interval", nn::scalar_entry(double(options_.growth_interval))},
          {"skipped_steps", nn::scalar_entry(double(skipped_steps()))}};
}

void GradScaler::load_state_dict(const nn::StateDict& sd) {
  std::vector<std::string> missing;
  for (const char* k : {"scale", "growth_tracker", "growth_factor", "backoff_factor",
                        "growth_interval", "skipped_steps"})
    if (!nn::find(sd, k)) missing.push_back(k);
  LOOM_CHECK(missing.empty(), "GradScaler::load_state_dict: missing ", nn::join_names(missing),
             " (got ", nn::join_names(nn::names(sd)), ")");
  const double scale = nn::scalar_value(sd, "scale", "GradScaler");
  LOOM_CHECK(scale > 0.0, "GradScaler::load_state_dict: scale must be positive, got ", scale);
  options_.growth_factor = nn::scalar_value(sd, "growth_factor", "GradScaler");
  options_.backoff_factor = nn::scalar_value(sd, "backoff_factor", "GradScaler");
  options_.growth_interval = int64_t(nn::scalar_value(sd, "growth_interval", "GradScaler"));
  skipped_ = int64_t(nn::scalar_value(sd, "skipped_steps", "GradScaler"));
  pending_scale_ = scale;
  pending_tracker_ = int64_t(nn::scalar_value(sd, "growth_tracker", "GradScaler"));
  if (scale_.defined()) {
    scale_.fill_(pending_scale_);
    growth_tracker_.fill_(double(pending_tracker_));
    found_inf_.fill_(0.0);
    skipped_on_device_.fill_(0.0);
  }
  unscaled_ = false;
}

}  // namespace loom::amp
