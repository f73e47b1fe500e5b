// The parameter types of ops that reach the kernels: reduction kinds, random fills, convolution
// and pooling geometry, fused optimizer hyper-parameters. The public op headers (autograd/ops)
// include this, not kernels/backend.h, so a program sees no Backend and no functors.
// Leaves out: the kernels' result types that hold tensors (BatchNormOut, ... in kernels/backend.h).
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace loom {

enum class ReduceOp { Sum, Mean, Max, Min };
// What a fused linear layer applies after its bias (Backend::linear).
enum class LinearActivation { None, Relu, GeluTanh };  // GeluTanh: GELU, tanh approximation
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
// kernels/backend_methods.inc).
// Note [Step scalars on the device]
// A step replayed from a CUDA graph cannot carry its learning rate and step number in the kernel's
// arguments: those were fixed at capture. With `lr` defined, the fused step reads them from
// device memory instead (the host values lr and step below are ignored):
//   lr:      float64 (1), the learning rate
//   step:    float64 (1), the updates applied so far; the update uses step + 1 (Adam's bias
//            correction; SGD's first-step rule when it is 0), and the backend adds 1 after it
//   skip_if: float32 (1) or undefined; nonzero (GradScaler's found_inf) skips the whole update
//            on the device: parameters, state and step stay as they are
// All on the parameters' device. Nothing is read back to the host.
struct DeviceStepScalars {
  Tensor lr, step, skip_if;
  bool defined() const { return lr.defined(); }
};

struct AdamStepParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay before the update
  bool amsgrad = false;
  int64_t step = 1;             // the number of this update (1 for the first), for bias correction
  DeviceStepScalars on_device;  // when defined, replaces lr and step (Note above)
  // Undefined, or one value of the parameters' dtype on their device that multiplies every
  // gradient before the update: the clip's coefficient (Note [Clipping inside the update] in
  // nn/optim/optimizer.h), read on the device like the scalars above.
  Tensor grad_scale;
};

// Hyper-parameters of one fused SGD update.
struct SgdStepParams {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;      // the momentum buffers are new: buf = d_p (PyTorch's first step)
  DeviceStepScalars on_device;  // when defined, replaces lr and first_step (step == 0)
};

}  // namespace loom
