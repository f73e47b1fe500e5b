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

void amp_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& scale) {
  LOOM_CHECK(found_inf.defined(), "amp_unscale_: found_inf is undefined");
  backend_for(found_inf.device()).amp_unscale_(grads, found_inf, scale);
  for (const Tensor& g : grads) g.bump_version();
  found_inf.bump_version();
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth, double backoff, int64_t interval) {
  LOOM_CHECK(scale.defined(), "amp_update_scale_: scale is undefined");
  backend_for(scale.device())
      .amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval);
  scale.bump_version();
  growth_tracker.bump_version();
}

}  // namespace loom
