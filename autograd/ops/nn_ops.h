// The neural-network ops in one include: softmax family and losses, convolution and pooling,
// normalisation, dropout, embedding, attention, rotary embedding, fused optimizer steps. Each
// family has its own header.
// Leaves out: the Modules that hold parameters for them (nn/).
#pragma once

#include "autograd/ops/attention.h"
#include "autograd/ops/conv_pool.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/embedding.h"
#include "autograd/ops/norm.h"
#include "autograd/ops/optim.h"
#include "autograd/ops/rope.h"
#include "autograd/ops/softmax_loss.h"
