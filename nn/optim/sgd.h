// SGD with momentum, dampening, Nesterov and (L2) weight decay: PyTorch's torch.optim.SGD.
// Leaves out: maximize, differentiable steps.
#pragma once

#include <memory>
#include <vector>

#include "nn/optim/optimizer.h"

namespace loom::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  // Update float32/float64 contiguous parameters with one Backend::sgd_step per (device, dtype);
  // false: the composite tensor-op version (the fused kernel's test oracle). Not saved.
  bool fused = true;
  // The hyper-parameters as the state dict names them, in order: f(name, field) for each.
  static constexpr auto fields = [](auto& o, const auto& f) {
    f("lr", o.lr);
    f("momentum", o.momentum);
    f("dampening", o.dampening);
    f("weight_decay", o.weight_decay);
    f("nesterov", o.nesterov);
  };
};

// d_p = g + wd * p; buf = d_p (first step) or momentum * buf + (1 - dampening) * d_p;
// d_p = nesterov ? d_p + momentum * buf : buf; p -= lr * d_p.  State: "momentum_buffer".
class SGD : public OptimizerWithOptions<SGDOptions> {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  void add_param_group(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  std::unique_ptr<Optimizer> make_like(std::vector<std::vector<Tensor>> groups) const override;

 protected:
  std::vector<std::string> buffer_names(size_t group) const override;
  bool counts_steps() const override { return false; }

 private:
  void step_composite(size_t index, const SGDOptions& o);
};

}  // namespace loom::optim
