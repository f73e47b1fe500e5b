// Dropout (autograd/ops/dropout.cpp).
// Leaves out: the Module (nn/layers.h), which passes its training flag.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace loom {

// Inverted dropout: in training, zero each element with probability p and scale the rest by
// 1 / (1 - p); the draw comes from gen's Philox stream (the default generator's when null).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace loom
