// Everything a program needs to compute with tensors: include this one header.
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
