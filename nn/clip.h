// Gradient clipping by the global norm of all gradients, as torch.nn.utils.clip_grad_norm_.
// Leaves out: clip_grad_value_, per-parameter clipping.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace loom::nn {

// total = the norm_type-norm of all gradients together (norm_type = infinity: the largest
// |g|); every gradient is scaled by min(1, max_norm / (total + 1e-6)). Parameters without a
// gradient are skipped. Returns total as a 0-d tensor on the gradients' device (no host sync
// unless error_if_nonfinite, which raises when total is NaN or infinite).
// The 2-norm of float32/float64 gradients is fused (one pass over all of them, deterministic).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// The same with one norm per gradient and then the norm of the norms, written with tensor ops:
// what every norm other than the fused 2-norm runs, and the fused path's test oracle.
Tensor clip_grad_norm_composite(const std::vector<Tensor>& params, double max_norm,
                                double norm_type = 2.0, bool error_if_nonfinite = false);

// The 2-norm clip of gradients split between ranks (ZeRO: each holds a disjoint share):
// sum_over_ranks adds the local sum of squares up over the ranks (an all-reduce), so every rank
// scales its share by the same coefficient. dtype and device are those of the gradients (a rank
// may hold none). Float32/float64 contiguous gradients (the fused path only).
Tensor clip_grad_norm_sharded_(const std::vector<Tensor>& grads, double max_norm, DType dtype,
                               Device device, const std::function<void(Tensor&)>& sum_over_ranks);

// The fused 2-norm clip without its scaling pass, for an optimizer that multiplies the
// gradients by `coef` inside its update (Note [Clipping inside the update] in
// nn/optim/optimizer.h): total as clip_grad_norm_'s, coef = min(1, max_norm / (total + 1e-6))
// (0-d, the gradients' dtype and device). Empty when clip_grad_norm_ would not take its fused
// path (gradients that are not contiguous float32/float64 of one dtype), or no parameter has a
// gradient.
struct ClipCoefficient {
  Tensor total, coef;
};
std::optional<ClipCoefficient> clip_coefficient(const std::vector<Tensor>& params, double max_norm);

// The 2-norm clip coefficient of a model split over ranks, each holding a share of it (Note
// [Optimizing a share of a model] in nn/optim/optimizer.h): total = sqrt of the squares of
// `counted`'s gradients summed over the ranks by sum_over_ranks, coef as clip_coefficient's.
// dtype and device are those of the gradients (a rank may count none). Scales nothing: the caller
// applies coef to every gradient it holds.
ClipCoefficient split_clip_coefficient(const std::vector<Tensor>& counted, double max_norm,
                                       DType dtype, Device device,
                                       const std::function<void(Tensor&)>& sum_over_ranks);

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace loom::nn
