// The fused optimizer steps (autograd/ops/optim.h): the backend's one-launch update, then the
// version bumps that every in-place op makes.
#include "autograd/ops/optim.h"

#include "kernels/backend.h"

namespace loom {

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& p) {
  if (params.empty()) return;
  backend_for(params[0].device())
      .adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, p);
  for (auto* list : {&params, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs})
    for (const Tensor& t : *list) t.bump_version();
}

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_bufs, const SgdStepParams& p) {
  if (params.empty()) return;
  backend_for(params[0].device()).sgd_step(params, grads, momentum_bufs, p);
  for (const Tensor& t : params) t.bump_version();
  for (const Tensor& t : momentum_bufs) t.bump_version();
}

}  // namespace loom
