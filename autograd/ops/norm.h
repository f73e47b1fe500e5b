// Normalisation: batch_norm (autograd/ops/norm.cpp), layer_norm and add_layer_norm
// (autograd/ops/layer_norm.cpp), rms_norm (autograd/ops/rms_norm.cpp).
// Leaves out: the Modules that hold the affine parameters and running statistics (nn/layers.h).
#pragma once

#include <optional>
#include <utility>

#include "core/tensor.h"

namespace loom {

// x: (N, C, ...). In training, running_mean/var (if defined) are updated in place. relu = true
// is relu(batch_norm(...)) as one op: the ReLU is applied in the normalising pass and its mask in
// the backward kernels' reads (what Sequential runs for a BatchNorm2d followed by a ReLU).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5, bool relu = false);
// relu(batch_norm(x, ...) + residual) as one op in training: a residual block's last batch
// norm, its shortcut add and the ReLU in batch norm's normalising pass (Note [Batch norm's
// fusions] in autograd/ops/norm.cpp). The composite of the three ops in eval, in anomaly mode,
// and for a residual of another dtype or shape than x (it broadcasts and promotes as `+`).
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight,
                           const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);
// max_pool2d(batch_norm(..., relu = true), 2) as one op: x (N, C, H, W) -> (N, C, H / 2, W / 2).
// On CUDA, in training, for NCHW x with even H and W and no autocast, three passes over x that
// never write the full-size activation (Note [Batch norm into max pool] in
// kernels/cuda/norm/cuda_batch_norm_pool.cu); elsewhere the two ops. What Sequential runs for a
// BatchNorm2d, a ReLU and a MaxPool2d(2) in a row.
Tensor batch_norm_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  bool training, double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims of `normalized_shape`; weight/bias of that shape or undefined.
// Runs as one fused op (Backend::layer_norm, Note [Fused layer norm] in
// autograd/ops/layer_norm.cpp); in anomaly mode, and as the fused op's test oracle, as
// layer_norm_composite. y_dtype: the result in that dtype, cast in the same pass (e.g. the
// autocast dtype of the Linear that reads it); nullopt keeps x's (float32 under autocast).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5,
                  std::optional<DType> y_dtype = std::nullopt);
// r = x + branch and y = layer_norm(r, ...), returned as {r, y}: a pre-norm transformer block's
// residual add and its next layer norm in one forward pass (Note [Layer norm with the residual
// add] in autograd/ops/layer_norm.cpp); the values and gradients of the two ops composed.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& branch,
                                         const Shape& normalized_shape,
                                         const Tensor& weight = Tensor(),
                                         const Tensor& bias = Tensor(), double eps = 1e-5,
                                         std::optional<DType> y_dtype = std::nullopt);
// The same from mean, square and rsqrt, its gradient from the pieces.
Tensor layer_norm_composite(const Tensor& x, const Shape& normalized_shape,
                            const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                            double eps = 1e-5);

// Llama's RMS norm over the last dim, as Hugging Face's LlamaRMSNorm: x: (..., N), weight (N) ->
// y (..., N) = weight * to(x_f * rsqrt(mean(x_f^2, -1) + eps), x's dtype), x_f = x in float32
// (float64 for float64 x). weight: x's dtype, or float32 for a float16/bfloat16 x (y is then
// float32), or undefined (y is the normalised x). One fused op (Note [RMS norm] in
// autograd/ops/rms_norm.cpp); under autocast x is cast to float32 first, as for layer_norm.
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6);
// The same from to, square, mean, rsqrt and mul, its gradient from the pieces: the oracle.
Tensor rms_norm_composite(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6);

}  // namespace loom
