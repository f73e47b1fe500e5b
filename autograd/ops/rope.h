// Rotary position embedding (RoPE) as Llama applies it to queries and keys: the configuration,
// its frequencies (with Llama 3's scaling), and the op (autograd/ops/rope.cpp; Note [Rotary
// embedding] there has the convention, the positions and the formulas with their source).
// Leaves out: the interleaved-pairs convention (Meta's original complex-number form), partial
// rotary dims, and the other scalings of transformers' modeling_rope_utils (linear, dynamic NTK,
// YaRN, LongRoPE).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace loom {

// Llama 3's frequency scaling: transformers' rope_scaling with "rope_type": "llama3". Llama 3.1's
// values below (Llama 3.2 uses factor 32).
struct RopeLlama3Scaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct RopeConfig {
  double theta = 500000.0;  // rope_theta: Llama 3's base (Llama 2: 10000)
  // The positions a positions tensor may hold: [0, max_position_embeddings). rope with an offset
  // is not limited by it (its table grows to offset + T).
  int64_t max_position_embeddings = 8192;
  std::optional<RopeLlama3Scaling> llama3;  // none: the unscaled frequencies
};

// inv_freq[i] for i < D / 2 (D the head size), in float64: theta^(-2i / D), then Llama 3's
// scaling when cfg.llama3 is set (Note [Rotary embedding] in autograd/ops/rope.cpp).
std::vector<double> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);

// x: (B, H, T, D) -> (B, H, T, D), x's dtype: each head's row at sequence index t rotated by the
// angles (offset + t) * inv_freq, Hugging Face's rotate_half convention (the first half of the head
// dim pairs with the second). offset: the position of x's first row (the KV cache's length when
// decoding). Any strides; the result keeps x's layout when x is dense. One fused op whose backward
// is the rotation by the opposite angles.
Tensor rope(const Tensor& x, int64_t offset, const RopeConfig& cfg);
// The same at given positions: (T) (every batch row alike) or (B, T), int64 on x's device, each in
// [0, cfg.max_position_embeddings) (an error names a position outside; on CUDA it is found by the
// kernel and reported at the next synchronisation).
Tensor rope(const Tensor& x, const Tensor& positions, const RopeConfig& cfg);

// The same from slice, index_select, mul and cat with autograd, the cos and sin rows cast to x's
// dtype first as Hugging Face does: the fused op's oracle.
Tensor rope_composite(const Tensor& x, int64_t offset, const RopeConfig& cfg);
Tensor rope_composite(const Tensor& x, const Tensor& positions, const RopeConfig& cfg);

}  // namespace loom
