// LRScheduler base (stepping, state) and the StepLR / CosineWithWarmup formulas.
// Leaves out: recursive ("chainable") forms; closed forms give the same rates.
#include "nn/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

namespace loom::optim {

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (size_t g = 0; g < opt.num_param_groups(); ++g) base_lrs_.push_back(opt.lr(g));
}

void LRScheduler::initialize() {
  auto lrs = get_lr();
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_lr(g, lrs[g]);
}

std::vector<double> LRScheduler::get_lr() const {
  std::vector<double> out;
  for (double b : base_lrs_) out.push_back(lr_at(b, last_epoch_));
  return out;
}

void LRScheduler::step() {
  ++last_epoch_;
  initialize();
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  LOOM_CHECK(epoch >= 0, "LRScheduler::set_last_epoch: step ", epoch, " is negative");
  last_epoch_ = epoch;
  initialize();
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  sd.emplace_back("last_epoch", nn::scalar_entry(double(last_epoch_)));
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    sd.emplace_back("base_lrs." + std::to_string(g), nn::scalar_entry(base_lrs_[g]));
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  LOOM_CHECK(sd.size() == base_lrs_.size() + 1,
             "LRScheduler.load_state_dict: expected last_epoch and ", base_lrs_.size(),
             " base rates, got ", sd.size(), " entries (", nn::join_names(nn::names(sd)), ")");
  int64_t epoch = int64_t(nn::scalar_value(sd, "last_epoch", "LRScheduler"));
  std::vector<double> base;
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    base.push_back(nn::scalar_value(sd, "base_lrs." + std::to_string(g), "LRScheduler"));
  last_epoch_ = epoch;
  base_lrs_ = base;
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  LOOM_CHECK(step_size > 0, "StepLR: step_size ", step_size, " must be positive");
  initialize();
}

double StepLR::lr_at(double base_lr, int64_t epoch) const {
  return base_lr * std::pow(gamma_, double(epoch / step_size_));
}

CosineWithWarmup::CosineWithWarmup(Optimizer& opt, CosineWithWarmupOptions o)
    : LRScheduler(opt), o_(o) {
  LOOM_CHECK(o.warmup_steps >= 0 && o.total_steps > o.warmup_steps,
             "CosineWithWarmup: need 0 <= warmup_steps (", o.warmup_steps, ") < total_steps (",
             o.total_steps, ")");
  LOOM_CHECK(o.warmup_start_factor >= 0.0 && o.warmup_start_factor <= 1.0,
             "CosineWithWarmup: warmup_start_factor ", o.warmup_start_factor, " is not in [0, 1]");
  initialize();
}

double CosineWithWarmup::lr_at(double base_lr, int64_t t) const {
  if (t < o_.warmup_steps) {
    double f0 = o_.warmup_start_factor;
    return base_lr * (f0 + (1.0 - f0) * double(t) / double(o_.warmup_steps));
  }
  double progress =
      std::min(1.0, double(t - o_.warmup_steps) / double(o_.total_steps - o_.warmup_steps));
  return o_.eta_min + (base_lr - o_.eta_min) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace loom::optim
