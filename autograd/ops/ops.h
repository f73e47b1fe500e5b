// Everything a program needs to compute with tensors: include this one header.
//
//   using namespace loom;
//   Tensor x = randn({64, 784});                           // float32 on the CPU
//   Tensor w = randn({784, 10}, {.requires_grad = true});  // a leaf that requires grad
//   Tensor loss = cross_entropy(matmul(x, w), randint(0, 10, {64}));
//   loss.backward();                                       // w.grad() now holds dL/dw
//   {
//     NoGradGuard no_grad;                                 // updates are not recorded
//     w.sub_(w.grad() * 0.1);
//   }
//
// Each family of ops has its own header below; docs/tour.md follows one step through them.
// Leaves out: Modules and optimizers (nn/), data loading (data/).
#pragma once

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn_ops.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "core/tensor.h"
