// SGD's step: fused buckets go to sgd_step_ (autograd/ops/optim.h), the rest (and fused = false)
// run the same formula with tensor ops under NoGradGuard.
// Leaves out: sparse gradients.
#include "nn/optim/sgd.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/optim.h"

namespace loom::optim {

namespace {
void check_options(const SGDOptions& o) {
  LOOM_CHECK(o.lr >= 0.0, "SGD: learning rate ", o.lr, " is negative");
  LOOM_CHECK(o.momentum >= 0.0, "SGD: momentum ", o.momentum, " is negative");
  LOOM_CHECK(o.weight_decay >= 0.0, "SGD: weight_decay ", o.weight_decay, " is negative");
  LOOM_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
             "SGD: Nesterov momentum needs momentum > 0 and dampening = 0, got momentum ",
             o.momentum, " and dampening ", o.dampening);
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : OptimizerWithOptions("SGD") {
  add_param_group(std::move(params), options);
}

std::unique_ptr<Optimizer> SGD::make_like(std::vector<std::vector<Tensor>> groups) const {
  LOOM_CHECK(groups.size() == options_.size() && !groups.empty(), name(),
             ".make_like: ", groups.size(), " groups given, this optimizer has ", options_.size());
  auto out = std::make_unique<SGD>(std::move(groups[0]), options_[0]);
  for (size_t g = 1; g < groups.size(); ++g)
    out->add_param_group(std::move(groups[g]), options_[g]);
  return out;
}

void SGD::add_param_group(std::vector<Tensor> params, SGDOptions options) {
  check_options(options);
  add_group(std::move(params), options);
}

std::vector<std::string> SGD::buffer_names(size_t g) const {
  if (options_[g].momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::step_composite(size_t i, const SGDOptions& o) {
  Tensor p = param(i);
  Tensor d = p.grad();
  if (o.weight_decay != 0.0) d = d + p * o.weight_decay;
  if (o.momentum != 0.0) {
    ParamState& st = state_of(i);
    if (st.buffers.empty()) {
      st.buffers.push_back(d.clone());
    } else {
      Tensor& buf = st.buffers[0];
      buf.mul_(o.momentum);
      buf.add_(d, 1.0 - o.dampening);
    }
    d = o.nesterov ? d + st.buffers[0] * o.momentum : st.buffers[0];
  }
  p.add_(d, -o.lr);
}

void SGD::step() {
  NoGradGuard guard;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const SGDOptions& o = options_[g];
    // With momentum, parameters whose buffer is new take the first-step rule: bucket them apart.
    // A capturable optimizer decides that on the device (Note [Capturable optimizer]).
    const DeviceStepScalars on_device = device_scalars(g);
    auto is_new = [&](size_t i) -> int64_t {
      if (on_device.defined()) {
        LOOM_CHECK(o.momentum == 0.0 || !state_of(i).buffers.empty(), name(), ".step: parameter \"",
                   param(i).name(),
                   "\" has no state; a capturable optimizer creates it in make_capturable()");
        return 0;
      }
      return int64_t(o.momentum != 0.0 && state_of(i).buffers.empty());
    };
    for (const auto& bucket : buckets_with_grad(g, is_new)) {
      if (!o.fused || !bucket.fusable) {
        for (size_t i : bucket.index) step_composite(i, o);
        continue;
      }
      std::vector<Tensor> ps, gs, bufs;
      bool first = is_new(bucket.index[0]) != 0;
      for (size_t i : bucket.index) {
        ps.push_back(param(i));
        gs.push_back(param(i).grad().contiguous());
        if (o.momentum != 0.0) {
          ParamState& st = state_of(i);
          if (st.buffers.empty()) st.buffers.push_back(zeros_like(param(i)));
          bufs.push_back(st.buffers[0]);
        }
      }
      sgd_step_(ps, gs, bufs,
                {.lr = o.lr,
                 .momentum = o.momentum,
                 .dampening = o.dampening,
                 .weight_decay = o.weight_decay,
                 .nesterov = o.nesterov,
                 .first_step = first,
                 .on_device = on_device});
    }
  }
}

}  // namespace loom::optim
