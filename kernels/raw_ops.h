// Copies that kernels need on their own inputs (a contiguous layout, another dtype), built on the
// backend's copy_. They record no autograd, so kernels and the op layer can both use them.
// Leaves out: the differentiable contiguous()/to() (autograd/ops/shape.h).
#pragma once

#include "core/tensor_views.h"
#include "kernels/backend.h"

namespace loom::raw {

// x itself when already contiguous, else a contiguous copy on x's device.
inline Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  backend_for(x.device()).copy_(out, x);
  return out;
}

// x itself when it is channels-last (Note [Channels-last]), else a channels-last copy.
inline Tensor channels_last(const Tensor& x) {
  if (is_channels_last(x)) return x;
  Tensor out = empty_channels_last(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  backend_for(x.device()).copy_(out, x);
  return out;
}

// x itself when it already has dtype t, else a converted contiguous copy.
inline Tensor cast(const Tensor& x, DType t) {
  if (x.dtype() == t) return x;
  Tensor out = empty(x.shape(), {.dtype = t, .device = x.device()});
  backend_for(x.device()).copy_(out, x);
  return out;
}

}  // namespace loom::raw
