// Normalisation: batch_norm and layer_norm (autograd/ops/norm.cpp).
// Leaves out: the Modules that hold the affine parameters and running statistics (nn/layers.h).
#pragma once

#include "core/tensor.h"

namespace loom {

// x: (N, C, ...). In training, running_mean/var (if defined) are updated in place. relu = true
// is relu(batch_norm(...)) as one op: the ReLU is applied in the normalising pass and its mask in
// the backward kernels' reads (what Sequential runs for a BatchNorm2d followed by a ReLU).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5, bool relu = false);
// Normalises over the trailing dims of `normalized_shape`; weight/bias of that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace loom
