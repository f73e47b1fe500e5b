// Fused optimizer steps (and the GradScaler's unscale and scale update) as ops: one in-place update
// of a whole list of parameters (on CUDA, one kernel launch), with PyTorch's formulas. Not
// differentiable and never recorded; nn/optim calls these (see Note [Fused optimizer steps] in
// kernels/backend_methods.inc) and keeps the composite version as their test oracle. Leaves out:
// the optimizers' state and parameter groups (nn/optim/).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/params.h"

namespace loom {

// One entry per parameter in every list, each of the parameter's shape, contiguous, of one
// floating dtype (f32 or f64) and on one device. max_exp_avg_sqs is empty unless p.amsgrad.
// Updates params, exp_avgs, exp_avg_sqs (and max_exp_avg_sqs) in place and bumps their versions.
void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& p);
// momentum_bufs is empty when p.momentum == 0. Updates params (and momentum_bufs) in place.
void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_bufs, const SgdStepParams& p);

// GradScaler's kernels (Note [Fused unscale] in kernels/backend_methods.inc). grads: contiguous
// float32/float64 on one device; scale, found_inf: float32 (1); growth_tracker: int32 (1).
// Multiplies every gradient by 1 / scale in place and sets found_inf to 1 on any inf/NaN.
void amp_unscale_(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& scale);
// On found_inf: scale *= backoff, tracker = 0; else after `interval` good steps, scale *= growth.
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth, double backoff, int64_t interval);

}  // namespace loom
