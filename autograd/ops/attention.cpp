// scaled_dot_product_attention as a composite of differentiable ops (matmul, the causal mask as
// an added most-negative value, softmax, dropout, matmul), so its gradient comes from the pieces;
// the argument checks; the padding mask of per-batch key lengths (Note [Key lengths]); and the
// fused path on CUDA (Note [Fused attention]). Leaves out: the fused kernels themselves
// (kernels/), and a mask tensor given by the caller.
#include "autograd/ops/attention.h"

#include <cmath>
#include <limits>

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax_loss.h"
#include "kernels/backend.h"

namespace loom {

// Note [Fused attention]
// The composite materialises the (Tq, Tk) scores and weights of every head, in the forward and
// again in the backward. A fused flash-attention path (Backend::sdpa_forward / sdpa_backward on
// CUDA, through cuDNN's SDPA graph, saving each row's logsumexp instead of the weights) will run
// where sdpa_fused_applies says so: CUDA inputs in bfloat16 or float16 after autocast's cast,
// head sizes and a dropout the kernel supports, with or without key lengths (Note [Key lengths]).
// The composite stays as that path's test oracle (scaled_dot_product_attention_composite) and runs
// everywhere else: the CPU, float32, float64, 3-d inputs.

// Note [Key lengths]
// A batch of right-padded sequences (BERT's) gives each row b its number of real tokens, len[b];
// keys j >= len[b] are padding and no query of row b may attend to them. That is cuDNN's padding
// mask (its SDPA graph's seq_len_kv per batch row with padding_mask set) and what transformers
// does with an attention_mask of ones then zeros. The composite adds the dtype's most negative
// finite value to those scores, as for the causal mask, built from one where() so that the two
// masks together never add two of them (which would overflow to -inf). With len[b] >= 1 every row
// keeps key 0, so no row is all masked; the queries at padded positions still get outputs (over
// the valid keys), which a model ignores. On CUDA the fused path takes the lengths as cuDNN's
// padding mask (seq_len_kv per row, seq_len_q = Tq so that every query keeps its output: Note
// [Flash attention through cuDNN]); the CPU twin cuts each row's keys the same way. The lengths'
// values (1 <= len[b] <= Tk) are checked only when they are on the CPU: on a GPU the check would
// cost a synchronisation, and a value outside that range is undefined behaviour there.

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

void check_args(const Tensor& q, const Tensor& k, const Tensor& v, double scale, double dropout_p) {
  detail::check_defined(kOp, q, "q");
  detail::check_defined(kOp, k, "k");
  detail::check_defined(kOp, v, "v");
  LOOM_CHECK(q.dim() == 3 || q.dim() == 4, kOp,
             ": q must be 4-d (B, H, Tq, D) or 3-d (N, Tq, D), got ", describe(q));
  LOOM_CHECK(k.dim() == q.dim() && v.dim() == q.dim(), kOp,
             ": q, k and v must have one rank, got q ", describe(q), ", k ", describe(k), ", v ",
             describe(v));
  LOOM_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp,
             ": q, k and v must have one dtype, got q ", describe(q), ", k ", describe(k), ", v ",
             describe(v));
  LOOM_CHECK(q.device() == k.device() && q.device() == v.device(), kOp,
             ": q, k and v must be on one device, got q ", describe(q), ", k ", describe(k), ", v ",
             describe(v));
  detail::check_floating(kOp, q);
  LOOM_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), kOp,
             ": q, k and v must have one batch", (q.dim() == 4 ? " B of (B, H)" : " (N)"),
             ", got q ", describe(q), ", k ", describe(k), ", v ", describe(v));
  if (q.dim() == 4) {  // grouped-query attention: Hkv heads of k and v dividing q's H
    LOOM_CHECK(k.size(1) == v.size(1), kOp, ": k and v must have one (B, H), got q ", describe(q),
               ", k ", describe(k), ", v ", describe(v),
               " (their heads may be fewer than q's: grouped-query attention)");
    LOOM_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, kOp, ": q has ", q.size(1),
               " heads and k and v have ", k.size(1),
               ": the key/value heads must divide the query heads (grouped-query attention); q ",
               describe(q), ", k ", describe(k), ", v ", describe(v));
  }
  LOOM_CHECK(k.size(-1) == q.size(-1), kOp, ": q and k must have one head size D, got q ",
             describe(q), " and k ", describe(k));
  LOOM_CHECK(v.size(-2) == k.size(-2), kOp, ": k and v must have one length Tk, got k ",
             describe(k), " and v ", describe(v));
  LOOM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p must be in [0, 1), got ",
             dropout_p, " (q ", describe(q), ")");
  LOOM_CHECK(std::isnan(scale) || std::isfinite(scale), kOp, ": scale must be finite, got ", scale,
             " (q ", describe(q), ")");
}

// key_lengths (N) int32/int64 on q's device, N the batch of q (B of 4-d, N of 3-d); on the CPU its
// values are in [1, Tk] (Note [Key lengths]).
void check_key_lengths(const Tensor& q, const Tensor& k, const Tensor& lengths) {
  if (!lengths.defined()) return;
  LOOM_CHECK(lengths.dtype() == kI64 || lengths.dtype() == kI32, kOp,
             ": key_lengths must be int32 or int64, got ", describe(lengths));
  LOOM_CHECK(lengths.dim() == 1 && lengths.size(0) == q.size(0), kOp, ": key_lengths must be (",
             q.size(0), ") (one length per batch row of q ", describe(q), "), got ",
             describe(lengths));
  LOOM_CHECK(lengths.device() == q.device(), kOp, ": key_lengths ", describe(lengths),
             " must be on q's device (q ", describe(q), ")");
  if (lengths.device() != kCPU) return;
  const int64_t Tk = k.size(-2);
  for (double len : lengths.to_vector<double>())
    LOOM_CHECK(len >= 1 && len <= double(Tk), kOp, ": key_lengths holds ", int64_t(len),
               ", outside [1, Tk = ", Tk, "] (k ", describe(k), ")");
}

// The most negative finite value of a floating dtype.
double lowest(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return -65504.0;
    case DType::BF16:
      return -3.3895313892515355e38;
    case DType::F32:
      return -double(std::numeric_limits<float>::max());
    default:
      return -std::numeric_limits<double>::max();
  }
}

// (Tq, Tk) in `dtype`: 0 where key j may be seen from query i (j <= i), the dtype's most negative
// finite value where not: after the softmax's max subtraction its exp is exactly 0, as -inf's
// would be, and anomaly mode (which stops at any inf an op reads) accepts it.
Tensor causal_mask(int64_t Tq, int64_t Tk, DType dtype, Device device) {
  Tensor rows = arange(0, double(Tq), 1, {.dtype = kI64, .device = device}).view({Tq, 1});
  Tensor cols = arange(0, double(Tk), 1, {.dtype = kI64, .device = device}).view({1, Tk});
  return where(gt(cols, rows), scalar_tensor(lowest(dtype), {.dtype = dtype, .device = device}),
               scalar_tensor(0.0, {.dtype = dtype, .device = device}));
}

// The scores' additive mask (broadcasting to (..., Tq, Tk)): the causal mask, the padding of
// `lengths` (Note [Key lengths]), both (one where: never two most-negative values added), or
// undefined when there is none. lengths (N) -> padding (N, 1, 1, Tk) for 4-d scores, (N, 1, Tk)
// for 3-d.
Tensor score_mask(const Tensor& scores, bool causal, const Tensor& lengths) {
  const int64_t r = scores.dim(), Tq = scores.size(-2), Tk = scores.size(-1);
  const DType dt = scores.dtype();
  const Device dev = scores.device();
  Tensor mask = causal ? causal_mask(Tq, Tk, dt, dev) : Tensor();
  if (!lengths.defined()) return mask;
  const int64_t N = lengths.size(0);
  Tensor cols = arange(0, double(Tk), 1, {.dtype = kI64, .device = dev}).view({1, Tk});
  Tensor padded = ge(cols, to(lengths, kI64).view({N, 1}));  // (N, Tk): key j >= len[n]
  padded = r == 4 ? padded.view({N, 1, 1, Tk}) : padded.view({N, 1, Tk});
  return where(padded, scalar_tensor(lowest(dt), {.dtype = dt, .device = dev}),
               mask.defined() ? mask : scalar_tensor(0.0, {.dtype = dt, .device = dev}));
}

// Note [Grouped-query attention]
// Llama 3 gives k and v fewer heads than q: Hkv heads, each shared by the H / Hkv consecutive query
// heads of its group (query head h reads key/value head h / (H / Hkv); Hkv = 1 is multi-query
// attention, Hkv = H the usual multi-head). The composite repeats each key/value head H / Hkv times
// along the head dim, as transformers' repeat_kv does (repeat_interleave: expand, then reshape),
// and the expand's backward sums the gradients of a group's query heads into its key/value head.
// The fused path never repeats them: cuDNN's SDPA graph takes k and v with Hkv heads and sums dk
// and dv over each group itself, and the CPU twin reads head h / (H / Hkv) in place. The KV cache
// (nn/gpt.h) then holds (B, Hkv, T, D), H / Hkv times less than repeated heads would.

// x (B, Hkv, T, D) -> (B, Hkv * n, T, D): each head n times in a row (transformers' repeat_kv).
Tensor repeat_kv(const Tensor& x, int64_t n) {
  if (n == 1) return x;
  const int64_t B = x.size(0), Hkv = x.size(1), T = x.size(2), D = x.size(3);
  return reshape(expand(unsqueeze(x, 2), {B, Hkv, n, T, D}), {B, Hkv * n, T, D});
}

// q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), checked and cast -> (..., Tq, Dv)
Tensor composite(const Tensor& q, const Tensor& k_in, const Tensor& v_in, const Tensor& lengths,
                 bool causal, double scale, double dropout_p, Generator* gen) {
  const int64_t r = q.dim();
  const int64_t group = r == 4 ? q.size(1) / k_in.size(1) : 1;
  const Tensor k = r == 4 ? repeat_kv(k_in, group) : k_in,
               v = r == 4 ? repeat_kv(v_in, group) : v_in;
  Tensor scores = matmul(q, transpose(k, r - 2, r - 1)) * scale;  // (..., Tq, Tk)
  // Masked scores become the most negative finite value: weight 0 after the softmax, and a zero
  // gradient through it. Every row keeps key 0, so no row is all masked.
  const Tensor mask = score_mask(scores, causal, lengths);
  if (mask.defined()) scores = scores + mask;
  Tensor weights = softmax(scores, -1);  // float32 under autocast
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, gen);
  return matmul(weights, v);
}

double resolve_scale(double scale, const Tensor& q) {
  return std::isnan(scale) ? 1.0 / std::sqrt(double(q.size(-1))) : scale;
}

}  // namespace

bool sdpa_fused_applies(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                        double dropout_p) {
  (void)causal;  // both masks run fused
  // The fused kernels have no dropout; anomaly mode runs the composite, one op per step.
  return dropout_p == 0.0 && !autograd::is_anomaly_enabled() &&
         sdpa_fused_unsupported(q, k, v).empty();
}

namespace {
// The fused path (Note [Fused attention]): one backend call forward, saving the output and each
// row's logsumexp, and one backward; lengths (B) or undefined (Note [Key lengths]).
Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lengths, bool causal,
             double scale) {
  TensorPair fwd = backend_for(q.device()).sdpa_forward(q, k, v, causal, scale, lengths);
  const Tensor& out = fwd.first;     // (B, H, Tq, D)
  const Tensor& stats = fwd.second;  // (B, H, Tq, 1) logsumexp, float32
  return record(kOp, out, {q, k, v},
                [sq = save(q, kOp), sk = save(k, kOp), sv = save(v, kOp), out = out.detach(), stats,
                 lengths, causal, scale](const Tensor& g) {
                  SdpaGrads r = backend_for(g.device())
                                    .sdpa_backward(g, sq.get(), sk.get(), sv.get(), out, stats,
                                                   causal, scale, SdpaGrads{}, lengths);
                  return Grads{r.dq, r.dk, r.dv};
                });
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale, double dropout_p, Generator* gen) {
  return scaled_dot_product_attention(q, k, v, Tensor(), causal, scale, dropout_p, gen);
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const Tensor& key_lengths, bool causal, double scale,
                                    double dropout_p, Generator* gen) {
  // Autocast first (the products' dtype), so the fused path sees the dtype it would compute in.
  const Tensor q = amp::cast_lower(q_in), k = amp::cast_lower(k_in), v = amp::cast_lower(v_in);
  check_args(q, k, v, scale, dropout_p);
  check_key_lengths(q, k, key_lengths);
  if (sdpa_fused_applies(q, k, v, causal, dropout_p))
    return fused(q, k, v, key_lengths, causal, resolve_scale(scale, q));
  return composite(q, k, v, key_lengths, causal, resolve_scale(scale, q), dropout_p, gen);
}

Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              bool causal, double scale, double dropout_p,
                                              Generator* gen) {
  return scaled_dot_product_attention_composite(q, k, v, Tensor(), causal, scale, dropout_p, gen);
}

Tensor scaled_dot_product_attention_composite(const Tensor& q_in, const Tensor& k_in,
                                              const Tensor& v_in, const Tensor& key_lengths,
                                              bool causal, double scale, double dropout_p,
                                              Generator* gen) {
  const Tensor q = amp::cast_lower(q_in), k = amp::cast_lower(k_in), v = amp::cast_lower(v_in);
  check_args(q, k, v, scale, dropout_p);
  check_key_lengths(q, k, key_lengths);
  return composite(q, k, v, key_lengths, causal, resolve_scale(scale, q), dropout_p, gen);
}

}  // namespace loom
