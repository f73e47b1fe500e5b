// Backend: the interface between the op layer (autograd/ops) and the kernels of one device type.
// Ops call backend_of(...) and one method; the CPU backend (kernels/cpu) and the CUDA backend
// (kernels/cuda) implement every method. Methods allocate their outputs on the inputs' device and
// never record autograd.
// Leaves out: device and dtype checks that name the user's op (the op layer does those first and
// passes only valid inputs); broadcasting for binary ops and copies is the backend's job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/fp8.h"
#include "kernels/functors.h"
#include "kernels/params.h"

namespace loom {

// The parameter types of the methods: ReduceOp, LinearActivation, Reduction, RandomKind,
// Conv2dParams, Pool2dParams, DeviceStepScalars, AdamStepParams and SgdStepParams in
// kernels/params.h; UnaryOp and BinaryOp in kernels/functors.h. The result types follow.

struct BatchNormOut {
  Tensor y;            // x's shape
  Tensor save_mean;    // (C), f32 (float64 for f64 inputs); empty in eval
  Tensor save_invstd;  // (C)
};

// Fused cross-entropy (Note [Fused cross-entropy] in autograd/ops/softmax_loss.cpp).
struct CrossEntropyOut {
  Tensor loss;   // 0-d (Mean, Sum) or (N) (None), float32 (float64 for f64 logits)
  Tensor lse;    // (N) log-sum-exp of each row, float32 (float64 for f64 logits); for backward
  Tensor scale;  // 0-d float64: 1 / (rows counted) for Mean, 1 otherwise; for backward
};

struct BatchNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // weight/bias grads undefined when weight undefined
};

// Fused linear (Note [Fused linear] in autograd/ops/linalg.cpp).
struct LinearOut {
  Tensor y;    // (M, N) = act(x @ w^T + bias)
  Tensor pre;  // (M, N) x @ w^T + bias, kept for backward: GeluTanh only (undefined otherwise)
};

// Backend::mm_gelu_tanh_backward (Note [Fused MLP] in autograd/ops/linalg.cpp).
struct GeluBackwardOut {
  Tensor grad;  // (M, K) = (g @ w) * gelu_tanh'(pre)
  Tensor bias;  // (K) the sum of grad's rows; undefined when not asked for
};

// Fused layer norm over the last dim (Note [Fused layer norm] in autograd/ops/layer_norm.cpp).
struct LayerNormOut {
  Tensor y;     // (M, N), x's dtype or LayerNormExtras::y_dtype
  Tensor mean;  // (M), x's dtype (float32 or float64)
  Tensor rstd;  // (M): 1 / sqrt(biased variance + eps)
  Tensor sum;   // (M, N) x + residual in x's dtype, what was normalised: with a residual only
};
// The optional parts of Backend::layer_norm (Note [Layer norm with the residual add] in
// autograd/ops/layer_norm.cpp).
struct LayerNormExtras {
  Tensor residual;               // (M, N) contiguous, any floating dtype: normalise x + residual
  std::optional<DType> y_dtype;  // y in this dtype (a following Linear's autocast dtype)
};
// The optional parts of Backend::layer_norm_backward (Note [Taking the pending gradient] in
// autograd/function.h; Note [Layer norm with the residual add] in autograd/ops/layer_norm.cpp).
struct LayerNormBackwardExtras {
  Tensor grad_add;  // (M, N) contiguous in x's dtype: added to grad_input as it is written
  std::optional<DType> grad_input_low;  // also write grad_input in this 16-bit dtype
};
struct LayerNormGrads {
  Tensor grad_input, grad_weight, grad_bias;  // the last two undefined when not asked for
  Tensor grad_input_low;  // grad_input in LayerNormBackwardExtras::grad_input_low, when asked
};

// Backend::rms_norm and its backward (Note [RMS norm] in autograd/ops/rms_norm.cpp).
struct RmsNormOut {
  Tensor y;     // (M, N), weight's dtype (x's without a weight)
  Tensor rstd;  // (M): 1 / sqrt(mean(x^2) + eps), float32 (float64 for float64 x)
};
struct RmsNormGrads {
  Tensor grad_input;   // (M, N), x's dtype
  Tensor grad_weight;  // (N), weight's dtype; undefined when not asked for
};

// The gradients of Backend::sdpa_backward, each of its input's shape (and laid out as the
// forward's output is: Note [Attention layout] in kernels/backend_methods.inc).
struct SdpaGrads {
  Tensor dq, dk, dv;
};

using TensorPair = std::pair<Tensor, Tensor>;

class Backend {
 public:
  virtual ~Backend() = default;

  // One pure virtual per entry of kernels/backend_methods.inc (the list, with its shape comments,
  // is written once and shared with the backend classes).
#define LOOM_BACKEND_METHOD(R, name, params) virtual R name params = 0;
#include "kernels/backend_methods.inc"
#undef LOOM_BACKEND_METHOD
};

// Backend::linear as the backend's own calls (mm, the bias added in place, the activation): the
// CPU's implementation, and CUDA's where cuBLASLt's epilogues do not apply (float64, a GELU
// output whose width is not a multiple of 8).
LinearOut linear_composite(Backend& be, const Tensor& x, const Tensor& w, const Tensor& bias,
                           LinearActivation act);

// Backend::mm_gelu_tanh_backward as the backend's own calls (mm, GeluTanhBackward, a row sum):
// the CPU's implementation, and CUDA's where cuBLASLt's epilogue does not apply (float64, widths
// that are not a multiple of 8, an algorithm cuBLASLt does not have).
GeluBackwardOut mm_gelu_tanh_backward_composite(Backend& be, const Tensor& g, const Tensor& w,
                                                const Tensor& pre, bool bias);

// layer_norm_backward's extras: grad_add undefined, or shaped like x (M, N), contiguous, x's
// dtype and device; grad_input_low float16 or bfloat16. An error names `op`.
void check_layer_norm_backward_extras(const char* op, const LayerNormBackwardExtras& e,
                                      const Tensor& x);

// mm's out_dtype: none, a's dtype, or float32 for float16/bfloat16 a. An error names `op`.
void check_mm_out_dtype(const char* op, const Tensor& a, std::optional<DType> out_dtype);
// mm_into_'s arguments: 2-d a (M, K) and b (K, N) of one dtype, out (M, N) contiguous in a
// dtype check_mm_out_dtype allows, one device. An error names `op` and the offending tensors.
void check_mm_into(const char* op, const Tensor& out, const Tensor& a, const Tensor& b);

// The input checks both backends' batch_norm_relu_max_pool2 and its backward share: x is
// (N, C, H, W) with even, non-zero H and W and more than one value per channel.
void check_batch_norm_pool2_input(const char* op, const Tensor& x);

// batch_norm's residual: undefined, or x's shape, dtype and device.
void check_batch_norm_residual(const char* op, const Tensor& x, const Tensor& residual);

// cross_entropy_backward's `into`: undefined, or (N, C) contiguous like the logits (same dtype and
// device).
void check_ce_into(const Tensor& into, const Tensor& logits);

// Backend::cross_entropy_with_grad_ composed of be's cross_entropy and cross_entropy_backward:
// its oracle, the CPU's implementation and CUDA's for rows too wide for the one-pass kernel.
CrossEntropyOut cross_entropy_with_grad_composed(Backend& be, const Tensor& logits,
                                                 const Tensor& target, Reduction r,
                                                 double label_smoothing, int64_t ignore_index);

// The lists sum_of_squares and scale_by_ take (Note [Fused gradient norm]): every tensor defined,
// contiguous, of one dtype (float32 or float64), on `dev`; an error names `op` and the first bad
// tensor. Returns the dtype (float32 for an empty list).
DType check_norm_list(const char* op, const std::vector<Tensor>& tensors, Device dev,
                      bool allow_16bit = false);
// scale_by_'s factor for a list of dtype dt: one value of dt (float32 for a 16-bit list) on dev.
void check_scale_factor(const Tensor& factor, DType dt, Device dev);

// The statistics' dtype of rms_norm for x's dtype: float64 for float64, float32 otherwise.
DType rms_norm_stat_dtype(DType x);
// rms_norm's arguments: x (M, N) contiguous and floating; weight undefined, or (N) contiguous of
// x's dtype (or float32 for float16/bfloat16 x), on x's device. Returns y's dtype (weight's, or x's
// without one). An error names `op` and the tensors.
DType check_rms_norm_args(const char* op, const Tensor& x, const Tensor& weight);
// rms_norm_backward's: those, dy (M, N) contiguous in y's dtype and rstd (M) contiguous in the
// statistics' dtype, all on x's device.
void check_rms_norm_backward_args(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                  const Tensor& rstd);

// rope's arguments (Backend::rope): x (B, H, T, D) floating with D even; cos and sin (P, D / 2)
// contiguous in the table dtype (float64 for float64 x, float32 otherwise) on x's device;
// positions undefined with 0 <= offset and offset + T <= P, or (B, T) int64 contiguous on x's
// device. An error names the tensors.
void check_rope_args(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                     int64_t offset);
// rope's result for x: uninitialised, x's shape and dtype, with x's strides when x is dense (no
// gaps, no overlaps, dims in any order: a transposed view of (B, T, H, D) keeps that layout), else
// laid out (B, T, H, D) as the attention outputs are (empty_attention_layout).
Tensor empty_rope_output(const Tensor& x);

// swiglu_backward's arguments: grad, gate and up of one shape, floating dtype and device.
void check_swiglu_backward_args(const Tensor& grad, const Tensor& gate, const Tensor& up);

// The checks both backends' sdpa_forward and sdpa_backward share: q (B, H, Tq, D), k (B, Hkv, Tk,
// D) and v (B, Hkv, Tk, Dv) with Hkv dividing H (Note [Grouped-query attention] in
// autograd/ops/attention.cpp), one floating dtype, one device.
void check_sdpa_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v);
// The key lengths of sdpa_forward and sdpa_backward: undefined, or (B) int32/int64 on q's device
// (their values are not read: Note [Key lengths] in autograd/ops/attention.cpp).
void check_sdpa_key_lengths(const char* op, const Tensor& q, const Tensor& key_lengths);
// sdpa_backward's `into`: all undefined, or dq, dk, dv of q's, k's and v's shapes, dtype and
// device with a contiguous last dim.
void check_sdpa_into(const char* op, const SdpaGrads& into, const Tensor& q, const Tensor& k,
                     const Tensor& v);

// An uninitialised (B, H, T, D) tensor laid out (B, T, H, D) in memory: the outputs of sdpa_forward
// and sdpa_backward (Note [Attention layout] in kernels/backend_methods.inc).
Tensor empty_attention_layout(int64_t B, int64_t H, int64_t T, int64_t D, Options opt);

// Why CUDA's fused attention (Backend::sdpa_forward and sdpa_backward on a GPU, Note [Flash
// attention through cuDNN] in kernels/cuda/attention/cudnn_sdpa.h) cannot take q, k, v, in words
// that name the values; empty when it can: CUDA tensors of float16 or bfloat16, D = Dv, 8 <= D <=
// 128 and D % 8 == 0, not both Tq and Tk 1 (cuDNN refuses that graph), in a loom built with
// cuDNN's frontend headers. The attention op runs its
// composite where this is not empty (the CPU backend's methods take any floating input: the naive
// twin).
std::string sdpa_fused_unsupported(const Tensor& q, const Tensor& k, const Tensor& v);

// The backend of a device: the CPU backend, or the CUDA backend when loom is built with CUDA.
Backend& backend_for(Device d);
bool has_backend(DeviceType t);  // compiled in (a CUDA build may still find no GPU at run time)

}  // namespace loom
