// Gradient clipping by the global norm of all gradients, as torch.nn.utils.clip_grad_norm_.
// Leaves out: clip_grad_value_, per-parameter clipping.
#pragma once

#include <limits>
#include <vector>

#include "core/tensor.h"

namespace loom::nn {

// total = the norm_type-norm of all gradients together (norm_type = infinity: the largest
// |g|); every gradient is scaled by min(1, max_norm / (total + 1e-6)). Parameters without a
// gradient are skipped. Returns total as a 0-d tensor on the gradients' device (no host sync
// unless error_if_nonfinite, which raises when total is NaN or infinite).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace loom::nn
