// The parameter types of ops that reach the kernels: reduction kinds, random fills, convolution
// and pooling geometry, fused optimizer hyper-parameters. The public op headers (autograd/ops)
// include this, not kernels/backend.h, so a program sees no Backend and no functors.
// Leaves out: the kernels' result types that hold tensors (BatchNormOut, ... in kernels/backend.h).
#pragma once

#include <array>
#include <cstdint>

namespace loom {

enum class ReduceOp { Sum, Mean, Max, Min };
enum class Reduction { None, Mean, Sum };
enum class RandomKind {
  Uniform,
  Normal,
  Int
};  // Uniform [a, b); Normal (mean a, std b); Int [a, b)

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2}, stride{2, 2}, padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
};

// Hyper-parameters of one fused Adam/AdamW update (see Note [Fused optimizer steps] in
// kernels/backend.h).
struct AdamStepParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay before the update
  bool amsgrad = false;
  int64_t step = 1;  // the number of this update (1 for the first), for bias correction
};

// Hyper-parameters of one fused SGD update.
struct SgdStepParams {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffers are new: buf = d_p (PyTorch's first step)
};

}  // namespace loom
