// Learning-rate schedulers: StepLR and CosineWithWarmup. Each computes the rate of step
// `last_epoch` in closed form from the base rates captured at construction and writes it into
// the optimizer's groups; step() advances by one (call it after optimizer.step()).
// Leaves out: chaining schedulers, ReduceLROnPlateau.
#pragma once

#include <vector>

#include "nn/optim/optimizer.h"

namespace loom::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // last_epoch += 1, then set every group's rate to get_lr().
  void step();
  // Jumps to step `epoch` (>= 0) and sets the rates for it: a resumed run continues its schedule.
  void set_last_epoch(int64_t epoch);
  // The rates for the current last_epoch, one per group.
  std::vector<double> get_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // "last_epoch" and "base_lrs.<g>" as 0-d float64 tensors.
  StateDict state_dict() const;
  // Restores last_epoch and base rates (the optimizer's own state holds its current rates).
  void load_state_dict(const StateDict& sd);

 protected:
  // Starts at last_epoch = 0 and sets the rates for it (as PyTorch's constructor does).
  explicit LRScheduler(Optimizer& opt);
  void initialize();
  virtual double lr_at(double base_lr, int64_t epoch) const = 0;

 private:
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma ^ floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

struct CosineWithWarmupOptions {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // warmup included; after it the rate stays at eta_min
  double eta_min = 0.0;
  double warmup_start_factor = 0.0;  // the rate at step 0 is base_lr * this
};

// For t < warmup: base_lr * (f0 + (1 - f0) * t / warmup). After: eta_min + (base_lr - eta_min) *
// (1 + cos(pi * (t - warmup) / (total - warmup))) / 2, constant eta_min from t = total on.
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& opt, CosineWithWarmupOptions options);

 protected:
  double lr_at(double base_lr, int64_t epoch) const override;

 private:
  CosineWithWarmupOptions o_;
};

}  // namespace loom::optim
