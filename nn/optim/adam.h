// Adam and AdamW (decoupled weight decay), with optional AMSGrad: PyTorch's torch.optim.Adam and
// torch.optim.AdamW, same formulas and defaults (see Note [Adam's update, as PyTorch computes it]
// in kernels/optim_math.h).
// Leaves out: maximize, capturable (device-side step counts for CUDA graphs), foreach flags.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "nn/optim/optimizer.h"

namespace loom::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2: added to the gradient
  bool amsgrad = false;
  // Update float32/float64 contiguous parameters with one Backend::adam_step per (device, dtype,
  // step); false: the composite tensor-op version (the fused kernel's test oracle). Not saved.
  bool fused = true;
  // The hyper-parameters as the state dict names them, in order: f(name, field) for each.
  static constexpr auto fields = [](auto& o, const auto& f) {
    f("lr", o.lr);
    f("beta1", o.betas.first);
    f("beta2", o.betas.second);
    f("eps", o.eps);
    f("weight_decay", o.weight_decay);
    f("amsgrad", o.amsgrad);
  };
};

// AdamW's options: the same fields, weight decay 1e-2 by default (as PyTorch).
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
  bool amsgrad = false;
  bool fused = true;
};

// State per parameter: "step", "exp_avg", "exp_avg_sq" (and "max_exp_avg_sq" with amsgrad).
class Adam : public OptimizerWithOptions<AdamOptions> {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  void add_param_group(std::vector<Tensor> params, AdamOptions options);
  void step() override;
  std::unique_ptr<Optimizer> make_like(std::vector<std::vector<Tensor>> groups) const override;

 protected:
  Adam(std::string name, bool decoupled_weight_decay);
  std::vector<std::string> buffer_names(size_t group) const override;
  bool counts_steps() const override { return true; }
  bool applies_grad_scale() const override { return true; }

 private:
  // grad_scale: undefined, or the clip's coefficient (Note [Clipping inside the update]).
  void step_composite(size_t index, const AdamOptions& o, const Tensor& grad_scale);
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  void add_param_group(std::vector<Tensor> params, AdamWOptions options);
};

}  // namespace loom::optim
