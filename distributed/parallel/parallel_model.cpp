// ParallelModel's shared parts and LocalModel: see distributed/parallel/parallel_model.h.
#include "distributed/parallel/parallel_model.h"

#include "core/error.h"

namespace loom::distributed {

namespace {
int64_t bytes_of(const Tensor& t) { return int64_t(t.numel() * t.element_size()); }
}  // namespace

ParallelModel::Memory plain_memory(nn::Module& model, const optim::Optimizer& opt) {
  ParallelModel::Memory m;
  for (const Tensor& p : model.parameters()) {
    m.parameters += bytes_of(p);
    if (p.grad().defined()) m.gradients += bytes_of(p.grad());
  }
  for (size_t i = 0; i < opt.all_params().size(); ++i)
    for (const Tensor& b : opt.state(i).buffers) m.optimizer_state += bytes_of(b);
  return m;
}

Tensor ParallelModel::forward_backward(const Tensor& x, const Tensor& y, int64_t micro_batches,
                                       std::optional<DType> autocast, amp::GradScaler* scaler) {
  (void)x, (void)y, (void)micro_batches, (void)autocast, (void)scaler;
  LOOM_FAIL("forward_backward: ", describe(),
            " is not pipelined; run forward and backward of train_module()");
}

nn::StateDict host_copy(const nn::StateDict& sd) {
  nn::StateDict out;
  for (const auto& [name, t] : sd)
    out.emplace_back(name, t.device().is_cpu() ? t.clone() : t.to(kCPU));
  return out;
}

LocalModel::LocalModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> opt)
    : owned_model_(std::move(model)),
      owned_opt_(std::move(opt)),
      model_(*owned_model_),
      opt_(*owned_opt_) {}

LocalModel::LocalModel(nn::Module& model, optim::Optimizer& opt) : model_(model), opt_(opt) {}

void LocalModel::load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) {
  if (check) check(model_.state_dict());
  model_.load_state_dict(whole);
}

}  // namespace loom::distributed
