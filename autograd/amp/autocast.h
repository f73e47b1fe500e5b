// Autocast: a thread-local scope in which the ops pick their compute dtype (mixed precision), as
// torch.autocast. Only the op layer (autograd/ops) reads it; docs/amp.md has the policy table.
// Leaves out: per-device scopes (one scope covers CPU and CUDA ops alike) and loss scaling
// (nn/amp/grad_scaler.h).
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace loom::amp {

// Note [Autocast policy]
// Inside `Autocast guard(DType::BF16)` (or F16):
//   lower precision: mm, bmm, matmul, linear, conv2d cast their floating inputs to the scope's
//     dtype (tensor cores on CUDA; fp32 accumulation in every backend);
//   fp32: softmax, log_softmax, cross_entropy, nll_loss, mse_loss, layer_norm, rms_norm, sum,
//     mean, exp, log, pow cast f16/bf16 inputs to float32;
//   batch_norm keeps an input of the scope's dtype in that dtype and casts weight and bias to it;
//     its kernels compute the statistics and the normalisation in float32 (as cuDNN's and
//     PyTorch's batch norm do under autocast), and the running statistics stay float32;
//   promote: the other ops with two floating inputs of different dtypes (add, sub, mul, div,
//     maximum, minimum, where) cast both to the wider one (float32 beats bf16 and f16);
//   everything else runs in its input's dtype.
// The casts are the differentiable `to` op, so the gradient of a float32 parameter comes back
// float32. The backward pass runs with autocast off (autograd/engine.cpp): gradients are
// computed in the dtypes the forward chose.
//
// Note [Autocast cast cache]
// A float32 leaf that requires grad (a parameter) is cast to the low dtype once per scope and
// dtype, not once per use: the cast is cached under (the tensor's impl, dtype) together with the
// tensor's version, so an in-place update (an optimizer step inside the scope) makes it cast
// again. The cache holds the source tensor (its impl cannot be reused while cached) and is
// cleared when the outermost Autocast scope on this thread ends.

// Enters a scope: dtype F16 or BF16 turns autocast on, std::nullopt turns it off (for a region
// inside an autocast scope that must run as written). The destructor restores the previous state.
class Autocast {
 public:
  explicit Autocast(std::optional<DType> dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> prev_;
};

// The current scope's low-precision dtype, or nullopt when autocast is off on this thread.
std::optional<DType> autocast_dtype();
inline bool is_autocast_enabled() { return autocast_dtype().has_value(); }

// The number of casts autocast has made on this thread (cache hits are not counted): a debug
// counter for tests and benchmarks.
int64_t autocast_cast_count();

// Note [Autocast channels-last]
// On CUDA, inside a float16/bfloat16 scope, conv2d lays its input and filter out channels-last
// (Note [Channels-last]): free for the first layer's one-channel input and filter (a view), a copy
// for a tensor that comes from outside the channels-last chain. Convolution, batch norm and max
// pooling then keep the layout, so the layers after the first need no copies. Measured on an
// H200 with cuDNN 9.14 (bench_gpu_kernels, batch 256): the cnn's convolutions in bf16 take
// 0.31 ms channels-last against 0.48 ms NCHW over the directions a training step runs. Strict
// float32 stays NCHW (its channels-last convolutions measured about twice as slow), and so does the
// CPU. set_channels_last_convolutions(false) turns it off (on by default).
void set_channels_last_convolutions(bool on);
bool channels_last_convolutions();

// ---- for the op layer (autograd/ops) only ----
// Each returns t unchanged when autocast is off or t needs no cast.
// float32 floating input -> the scope's dtype (cached for parameters, Note [Autocast cast cache]).
Tensor cast_lower(const Tensor& t);
// float16/bfloat16 input -> float32.
Tensor cast_fp32(const Tensor& t);
// Two floating inputs of different dtypes -> both in the wider dtype.
void promote(Tensor& a, Tensor& b);
// conv2d's input or filter -> channels-last under Note [Autocast channels-last]'s conditions.
Tensor conv_layout(const Tensor& t);

}  // namespace loom::amp
