// scaled_dot_product_attention_packed: attention on a GPT's packed qkv projection (B, T, 3C),
// as one autograd node where the fused path applies (Note [Packed attention]) and as views plus
// scaled_dot_product_attention elsewhere. Leaves out: grouped-query layouts (k and v with fewer
// heads), and packings other than [q | k | v] along the last dim.
#include <array>
#include <cmath>
#include <string>

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/shape.h"
#include "core/tensor_views.h"
#include "kernels/backend.h"
#include "kernels/raw_ops.h"

namespace loom {

// Note [Packed attention]
// A GPT splits its qkv projection (B, T, 3C) into q, k and v as (B, H, T, D) views. Through
// autograd those views' backward (select, then transpose) gives each gradient its own zero-filled
// (B, T, 3C) tensor with one third written, and adds the three: for GPT-2 124M at B = 16, T = 1024
// three strided copies and two additions of 75 MB per layer, 3.3 ms of a 44 ms step on an H200
// (docs/perf.md). Packed, the op is one node whose input is qkv itself: the fused backward writes
// dq, dk and dv straight into the thirds of one (B, T, 3, H, D) tensor (Backend::sdpa_backward's
// `into`), and that tensor is qkv's gradient. The forward's output is laid out (B, T, H, D) behind
// its (B, H, T, D) shape (Note [Attention layout]), so the (B, T, C) result is a view of it.

namespace {

constexpr const char* kOp = "scaled_dot_product_attention_packed";

// qkv (B, T, 3C) -> q, k, v: (B, H, T, D) raw views (no autograd) or differentiable ones.
std::array<Tensor, 3> split(const Tensor& qkv, int64_t n_head, bool differentiable) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  std::array<Tensor, 3> out;
  if (differentiable) {
    Tensor five = view(qkv, {B, T, 3, n_head, D});
    for (int64_t i = 0; i < 3; ++i) out[size_t(i)] = transpose(select(five, 2, i), 1, 2);
  } else {
    Tensor five = raw::view(qkv, {B, T, 3, n_head, D});
    for (int64_t i = 0; i < 3; ++i) out[size_t(i)] = raw::transpose(raw::select(five, 2, i), 1, 2);
  }
  return out;
}

void check_packed(const Tensor& qkv, int64_t n_head) {
  detail::check_defined(kOp, qkv, "qkv");
  LOOM_CHECK(qkv.dim() == 3 && n_head > 0 && qkv.size(2) % (3 * n_head) == 0, kOp,
             ": qkv must be (B, T, 3C) with C a multiple of n_head = ", n_head, ", got ",
             describe(qkv));
  LOOM_CHECK(qkv.stride(2) == 1 && qkv.stride(1) % qkv.size(2) == 0 && qkv.stride(1) >= qkv.size(2),
             kOp, ": qkv must have contiguous rows of 3C values, got ", describe(qkv));
}

// The one-node fused path: (B, T, 3C) -> (B, T, C).
Tensor packed_fused(const Tensor& qkv, int64_t n_head, bool causal, double scale) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, D = C / n_head;
  const auto [q, k, v] = split(qkv, n_head, false);
  TensorPair fwd = backend_for(qkv.device()).sdpa_forward(q, k, v, causal, scale);
  const Tensor out = fwd.first,
               stats = fwd.second;  // (B, H, T, D) laid out (B, T, H, D); (B, H, T, 1)
  Tensor y = raw::view(raw::transpose(out, 1, 2), {B, T, C});  // a view (Note [Attention layout])
  return record(
      kOp, y, {qkv},
      [sqkv = save(qkv, kOp), out, stats, n_head, causal, scale, B, T, C, D](const Tensor& g) {
        const Tensor& packed = sqkv.get();
        const auto views = split(packed, n_head, false);
        Tensor g4 = raw::transpose(raw::view(raw::contiguous(g), {B, T, n_head, D}), 1, 2);
        Tensor dqkv = empty({B, T, 3 * C}, {.dtype = g.dtype(), .device = g.device()});
        const auto into = split(dqkv, n_head, false);
        backend_for(g.device())
            .sdpa_backward(g4, views[0], views[1], views[2], out, stats, causal, scale,
                           SdpaGrads{into[0], into[1], into[2]});
        return Grads{dqkv};
      });
}

}  // namespace

Tensor scaled_dot_product_attention_packed(const Tensor& qkv_in, int64_t n_head, bool causal,
                                           double scale, double dropout_p, Generator* gen) {
  const Tensor qkv = amp::cast_lower(qkv_in);
  check_packed(qkv, n_head);
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  const auto [q, k, v] = split(qkv, n_head, false);
  if (sdpa_fused_applies(q, k, v, causal, dropout_p)) {
    const double s = std::isnan(scale) ? 1.0 / std::sqrt(double(C / n_head)) : scale;
    return packed_fused(qkv, n_head, causal, s);
  }
  const auto parts = split(qkv, n_head, true);
  Tensor y = scaled_dot_product_attention(parts[0], parts[1], parts[2], causal, scale, dropout_p,
                                          gen);   // (B, H, T, D)
  return reshape(transpose(y, 1, 2), {B, T, C});  // (B, T, H, D) -> (B, T, C)
}

}  // namespace loom
