// Scaled dot-product attention (autograd/ops/attention.cpp), as
// torch.nn.functional.scaled_dot_product_attention: softmax(q k^T * scale + mask) v, with an
// optional causal mask, an optional padding mask given as per-batch key lengths (right-padded
// sequences), dropout on the attention weights, and grouped-query heads (k and v with fewer heads
// than q). On CUDA in float16/bfloat16 cuDNN's fused flash attention runs, with key lengths as its
// padding mask (Note [Key lengths] in autograd/ops/attention.cpp). Leaves out: an arbitrary
// attn_mask tensor and left padding.
#pragma once

#include <limits>

#include "core/generator.h"
#include "core/tensor.h"

namespace loom {

// The scale argument's default: 1 / sqrt(D), D the head size of q (a NaN stands for "not given").
inline constexpr double kDefaultScale = std::numeric_limits<double>::quiet_NaN();

// q: (B, H, Tq, D), k: (B, Hkv, Tk, D), v: (B, Hkv, Tk, Dv) -> (B, H, Tq, Dv), with Hkv dividing H
// (grouped-query attention: query head h attends with key/value head h / (H / Hkv), Note
// [Grouped-query attention] in autograd/ops/attention.cpp; Hkv = H is multi-head attention); or
// the same without heads: (N, Tq, D), (N, Tk, D), (N, Tk, Dv) -> (N, Tq, Dv). q, k and v share one
// floating dtype and device. causal: query i attends to keys j <= i only (PyTorch's top-left
// aligned mask, also when Tq != Tk). dropout_p in [0, 1): dropout on the attention weights, drawn
// from gen (the default generator when null); pass 0 in evaluation. Under autocast the two products
// run in the scope's dtype and the softmax in float32 (Note [Autocast policy] in
// autograd/amp/autocast.h); the result is in the scope's dtype.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, double scale = kDefaultScale,
                                    double dropout_p = 0.0, Generator* gen = nullptr);

// The same with a padding mask: key_lengths (B) (or (N) for 3-d inputs), int32 or int64 on q's
// device, says how many keys of each batch row are real: keys j >= key_lengths[b] are masked for
// every query (and head) of row b, as cuDNN's padding mask with seq_len_kv (Note [Key lengths] in
// autograd/ops/attention.cpp). Values in [1, Tk] (checked when on the CPU). With causal, both
// masks apply. An undefined key_lengths is the overload above. Runs as the composite, also on
// CUDA.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_lengths, bool causal = false,
                                    double scale = kDefaultScale, double dropout_p = 0.0,
                                    Generator* gen = nullptr);

// The same, always as the composite of matmul, softmax and dropout: the reference a fused path is
// tested against, and what runs wherever none applies.
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              bool causal = false, double scale = kDefaultScale,
                                              double dropout_p = 0.0, Generator* gen = nullptr);
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const Tensor& key_lengths, bool causal = false,
                                              double scale = kDefaultScale, double dropout_p = 0.0,
                                              Generator* gen = nullptr);

// Self-attention on a packed projection, as a GPT computes it: qkv (B, T, 3C) holds q, k and v
// side by side along the last dim, each split into n_head heads of D = C / n_head -> (B, T, C),
// the heads side by side again. The same values and gradients as splitting qkv into (B, H, T, D)
// views and calling scaled_dot_product_attention, but where the fused path applies its backward
// writes the three gradients straight into one (B, T, 3C) tensor (Note [Packed attention] in
// autograd/ops/attention_packed.cpp).
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head, bool causal = false,
                                           double scale = kDefaultScale, double dropout_p = 0.0,
                                           Generator* gen = nullptr);

// Whether the fused attention path takes these (already autocast) inputs: CUDA, bfloat16 or
// float16, a head size cuDNN supports, no dropout, not in anomaly mode (Note [Fused attention] in
// autograd/ops/attention.cpp).
bool sdpa_fused_applies(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                        double dropout_p);

}  // namespace loom
