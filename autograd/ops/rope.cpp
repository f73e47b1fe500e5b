// Rotary position embedding: the frequencies (default and Llama 3's), the cos and sin tables kept
// once per configuration, head size, device and dtype, the fused op (Backend::rope forward, and
// again with the opposite angles as its backward) and the composite of slice, index_select, mul
// and cat that is its oracle and what anomaly mode runs.
// Leaves out: the interleaved convention and the other scalings (see autograd/ops/rope.h), and
// freeing the tables (they live for the process, one per configuration in use).
#include "autograd/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "autograd/anomaly.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/shape.h"
#include "core/tensor_views.h"
#include "kernels/backend.h"
#include "kernels/raw_ops.h"

namespace loom {

// Note [Rotary embedding]
// Convention. Llama rotates each query and key head vector x (D values) by angles that grow with
// its position p: pair k of the vector is turned by p * inv_freq[k]. Which values form a pair is a
// convention. Meta's original code takes adjacent values (x[2k], x[2k + 1]) as one complex number
// (interleaved); Hugging Face's transformers, whose checkpoints loom loads, permutes the q and k
// projection weights at conversion so that the pairs are (x[k], x[k + D/2]), the two halves of the
// head dim, and applies
//   rotate_half(x) = cat(-x[D/2:], x[:D/2]);  y = x * cos + rotate_half(x) * sin
// with cos, sin = cat(c, c), cat(s, s) of c[k] = cos(p inv_freq[k]), s[k] = sin(...). That is, for
// k < D/2:  y[k] = x[k] c[k] - x[k + D/2] s[k],  y[k + D/2] = x[k + D/2] c[k] + x[k] s[k].
// loom uses the half-split form (the weights load unchanged); an interleaved checkpoint would
// need its q and k weights permuted, not another kernel.
// Layout. x is (B, H, T, D): the attention op's layout (Note [Attention layout] in
// kernels/backend_methods.inc), the one Hugging Face's apply_rotary_pos_emb rotates (cos unsqueezed
// at dim 1), and the KV cache's (nn/gpt.h); a projection's (B, T, H, D) output goes in as its
// transposed view without a copy, and the result keeps that memory layout, so the attention reads
// it in place too.
// Positions. Row t of x is at position offset + t (offset: how many positions the KV cache holds,
// 0 in training), or at positions[b, t] when given (Hugging Face's position_ids).
// Frequencies (transformers' modeling_rope_utils, _compute_default_rope_parameters and
// _compute_llama3_parameters): inv_freq[k] = theta^(-2k / D), k < D/2. With Llama 3's scaling
// (factor f, low_freq_factor l, high_freq_factor h, original_max_position_embeddings L), with
// wavelen = 2 pi / inv_freq:
//   wavelen < L / h            (high frequencies)  kept:         inv_freq
//   wavelen > L / l            (low frequencies)   divided:      inv_freq / f
//   otherwise (medium), with smooth = (L / wavelen - l) / (h - l):
//                                                  interpolated: (1 - smooth) inv_freq / f
//                                                                + smooth inv_freq
// The attention factor of this scaling is 1 (cos and sin are not scaled).
// Tables. The angles are computed on the host in float64 and their cos and sin kept as (P, D/2)
// tables, float32 (float64 for float64 x), once per (configuration, D, device, dtype): every call
// after the first reads them, nothing per batch is materialised. With an offset the table grows
// (doubling) to cover offset + T; with a positions tensor it covers max_position_embeddings. A
// step captured into a CUDA graph must have run once before capture, so its table exists.
// transformers computes inv_freq and the angles in float32 and rounds cos and sin to x's dtype
// before the products; loom's tables are the float64 angles rounded once to float32, and the
// kernels rotate in float32 and round once. The difference is within bfloat16's rounding.
// Backward. The rotation is orthogonal: the gradient of x is the incoming gradient rotated by the
// opposite angles (sin negated), the same kernel.

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

std::vector<double> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim) {
  LOOM_CHECK(head_dim > 0 && head_dim % 2 == 0 && cfg.theta > 0, "rope: head size ", head_dim,
             " must be even and positive and theta ", cfg.theta, " positive");
  std::vector<double> inv(size_t(head_dim / 2));
  for (int64_t k = 0; k < head_dim / 2; ++k)
    inv[size_t(k)] = 1.0 / std::pow(cfg.theta, double(2 * k) / double(head_dim));
  if (!cfg.llama3) return inv;
  const RopeLlama3Scaling& s = *cfg.llama3;
  LOOM_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                 s.original_max_position_embeddings > 0,
             "rope: Llama 3 scaling needs factor > 0 (got ", s.factor, "), 0 < low_freq_factor (",
             s.low_freq_factor, ") < high_freq_factor (", s.high_freq_factor,
             ") and original_max_position_embeddings > 0 (", s.original_max_position_embeddings,
             ")");
  const double L = double(s.original_max_position_embeddings);
  const double low_wavelen = L / s.low_freq_factor, high_wavelen = L / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * kPi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f /= s.factor;
      continue;
    }
    const double smooth =
        (L / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1.0 - smooth) * f / s.factor + smooth * f;
  }
  return inv;
}

namespace {

constexpr const char* kOp = "rope";

struct Table {
  Tensor cos, sin;  // (P, D/2)
};

// cos and sin of p * inv_freq[k] for p < len, computed in float64, in dtype dt on dev.
Table build_table(const RopeConfig& cfg, int64_t D, int64_t len, Device dev, DType dt) {
  const std::vector<double> inv = rope_inv_freq(cfg, D);
  const int64_t half = D / 2;
  std::vector<double> c(size_t(len * half)), s(size_t(len * half));
  for (int64_t p = 0; p < len; ++p)
    for (int64_t k = 0; k < half; ++k) {
      const double a = double(p) * inv[size_t(k)];
      c[size_t(p * half + k)] = std::cos(a);
      s[size_t(p * half + k)] = std::sin(a);
    }
  auto put = [&](const std::vector<double>& v) {
    return raw::cast(from_vector(v, {len, half}), dt).to(dev);
  };
  return {put(c), put(s)};
}

// The table for (cfg, D, dev, dt) with at least min_len positions: kept, and grown (doubling)
// when a call needs more (Note [Rotary embedding]).
Table table_for(const RopeConfig& cfg, int64_t D, Device dev, DType dt, int64_t min_len) {
  using Key = std::tuple<double, bool, double, double, double, int64_t, int64_t, int, int, int>;
  static std::mutex mu;
  static auto* cache = new std::map<Key, Table>();  // never freed: tables live for the process
  const RopeLlama3Scaling s = cfg.llama3.value_or(RopeLlama3Scaling{});
  const Key key{cfg.theta,
                cfg.llama3.has_value(),
                s.factor,
                s.low_freq_factor,
                s.high_freq_factor,
                s.original_max_position_embeddings,
                D,
                int(dev.type),
                dev.index,
                int(dt)};
  std::lock_guard<std::mutex> lock(mu);
  Table& t = (*cache)[key];
  if (t.cos.defined() && t.cos.size(0) >= min_len) return t;
  const int64_t grown = t.cos.defined() ? 2 * t.cos.size(0) : 0;
  t = build_table(cfg, D, std::max({min_len, grown, int64_t(256)}), dev, dt);
  return t;
}

void check_x(const Tensor& x) {
  detail::check_defined(kOp, x);
  detail::check_floating(kOp, x);
  LOOM_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) > 0, kOp, ": x ", describe(x),
             " should be (B, H, T, D) with an even head size D");
}

// positions (T) or (B, T) int64 on x's device -> (B, T) contiguous.
Tensor positions_bt(const Tensor& x, const Tensor& positions) {
  detail::check_defined(kOp, positions, "positions");
  const int64_t B = x.size(0), T = x.size(2);
  const bool shaped = (positions.dim() == 1 && positions.size(0) == T) ||
                      (positions.dim() == 2 && positions.shape() == Shape({B, T}));
  LOOM_CHECK(shaped && positions.dtype() == DType::I64 && positions.device() == x.device(), kOp,
             ": positions ", describe(positions), " should be int64 (T) or (B, T) = (", B, ", ", T,
             ") on the device of x ", describe(x));
  const Tensor p = positions.dim() == 1 ? raw::unsqueeze(positions, 0) : positions;
  return raw::contiguous(raw::expand(p, {B, T}));
}

// x (B, H, T, D), pos (B, T) -> the rotated x, with autograd through the pieces.
Tensor composite(const Tensor& x, const Tensor& pos, const Table& t) {
  const int64_t B = x.size(0), T = x.size(2), half = x.size(3) / 2;
  const Tensor idx = raw::view(pos, {B * T});
  const Tensor c = view(to(index_select(t.cos, 0, idx), x.dtype()), {B, 1, T, half});
  const Tensor s = view(to(index_select(t.sin, 0, idx), x.dtype()), {B, 1, T, half});
  const Tensor x1 = slice(x, 3, 0, half), x2 = slice(x, 3, half, 2 * half);
  return cat({x1 * c - x2 * s, x2 * c + x1 * s}, 3);
}

// The fused op: pos (B, T) or undefined (positions offset + t).
Tensor fused(const Tensor& x, const Tensor& pos, int64_t offset, const Table& t) {
  Tensor y = backend_for(x.device()).rope(x, t.cos, t.sin, pos, offset, false);
  return record(kOp, y, {x}, [t, pos, offset](const Tensor& g) {
    return Grads{backend_for(g.device()).rope(g, t.cos, t.sin, pos, offset, true)};
  });
}

DType table_dtype(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

Tensor offset_positions(const Tensor& x, int64_t offset) {
  const int64_t T = x.size(2);
  Tensor p =
      arange(double(offset), double(offset + T), 1.0, {.dtype = DType::I64, .device = x.device()});
  return raw::contiguous(raw::expand(raw::unsqueeze(p, 0), {x.size(0), T}));
}

void check_offset(const Tensor& x, int64_t offset) {
  LOOM_CHECK(offset >= 0, kOp, ": offset ", offset, " must be >= 0 (x ", describe(x), ")");
}

}  // namespace

Tensor rope(const Tensor& x, int64_t offset, const RopeConfig& cfg) {
  check_x(x);
  check_offset(x, offset);
  if (autograd::is_anomaly_enabled()) return rope_composite(x, offset, cfg);
  const Table t = table_for(cfg, x.size(3), x.device(), table_dtype(x), offset + x.size(2));
  return fused(x, Tensor(), offset, t);
}

Tensor rope(const Tensor& x, const Tensor& positions, const RopeConfig& cfg) {
  check_x(x);
  const Tensor pos = positions_bt(x, positions);
  if (autograd::is_anomaly_enabled()) return rope_composite(x, positions, cfg);
  const Table t =
      table_for(cfg, x.size(3), x.device(), table_dtype(x), cfg.max_position_embeddings);
  return fused(x, pos, 0, t);
}

Tensor rope_composite(const Tensor& x, int64_t offset, const RopeConfig& cfg) {
  check_x(x);
  check_offset(x, offset);
  const Table t = table_for(cfg, x.size(3), x.device(), table_dtype(x), offset + x.size(2));
  return composite(x, offset_positions(x, offset), t);
}

Tensor rope_composite(const Tensor& x, const Tensor& positions, const RopeConfig& cfg) {
  check_x(x);
  const Tensor pos = positions_bt(x, positions);
  const Table t =
      table_for(cfg, x.size(3), x.device(), table_dtype(x), cfg.max_position_embeddings);
  return composite(x, pos, t);
}

}  // namespace loom
