// Convolution and pooling over NCHW tensors (autograd/ops/conv_pool.cpp).
// Leaves out: the Modules that hold their weights and settings (nn/layers.h).
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/params.h"

namespace loom {

// x: (N, C, H, W), weight: (K, C/groups, R, S), bias: (K) or undefined -> (N, K, P, Q)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dParams& p = {});
// x: (N, C, H, W) -> (N, C, P, Q)
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
// (N, C, H, W) -> (N, C, out_h, out_w) with PyTorch's adaptive windows.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> out_size);

}  // namespace loom
