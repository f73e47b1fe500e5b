// scaled_dot_product_attention as a composite of differentiable ops (matmul, the causal mask as
// an added -inf, softmax, dropout, matmul), so its gradient comes from the pieces; the argument
// checks; and the spot where a fused path will be called (Note [Fused attention]).
// Leaves out: the fused kernels themselves, and a mask tensor given by the caller.
#include "autograd/ops/attention.h"

#include <cmath>

#include "autograd/amp/autocast.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax_loss.h"

namespace loom {

// Note [Fused attention]
// The composite materialises the (Tq, Tk) scores and weights of every head, in the forward and
// again in the backward. A fused flash-attention path (Backend::sdpa_forward / sdpa_backward on
// CUDA, through cuDNN's SDPA graph, saving each row's logsumexp instead of the weights) will run
// where sdpa_fused_applies says so: CUDA inputs in bfloat16 or float16 after autocast's cast,
// head sizes and a dropout the kernel supports. The composite stays as that path's test oracle
// (scaled_dot_product_attention_composite) and runs everywhere else: the CPU, float32, float64.

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
  for (int64_t d = 0; d < q.dim() - 2; ++d)
    LOOM_CHECK(k.size(d) == q.size(d) && v.size(d) == q.size(d), kOp,
               ": q, k and v must have one batch", (q.dim() == 4 ? " (B, H)" : " (N)"), ", got q ",
               describe(q), ", k ", describe(k), ", v ", describe(v));
  LOOM_CHECK(k.size(-1) == q.size(-1), kOp, ": q and k must have one head size D, got q ",
             describe(q), " and k ", describe(k));
  LOOM_CHECK(v.size(-2) == k.size(-2), kOp, ": k and v must have one length Tk, got k ",
             describe(k), " and v ", describe(v));
  LOOM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p must be in [0, 1), got ",
             dropout_p, " (q ", describe(q), ")");
  LOOM_CHECK(std::isnan(scale) || std::isfinite(scale), kOp, ": scale must be finite, got ", scale,
             " (q ", describe(q), ")");
}

// (Tq, Tk) in `dtype`: 0 where key j may be seen from query i (j <= i), -inf where not.
Tensor causal_mask(int64_t Tq, int64_t Tk, DType dtype, Device device) {
  Tensor rows = arange(0, double(Tq), 1, {.dtype = kI64, .device = device}).view({Tq, 1});
  Tensor cols = arange(0, double(Tk), 1, {.dtype = kI64, .device = device}).view({1, Tk});
  return where(gt(cols, rows), scalar_tensor(-INFINITY, {.dtype = dtype, .device = device}),
               scalar_tensor(0.0, {.dtype = dtype, .device = device}));
}

// q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), checked and cast -> (..., Tq, Dv)
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                 double dropout_p, Generator* gen) {
  const int64_t r = q.dim();
  Tensor scores = matmul(q, transpose(k, r - 2, r - 1)) * scale;  // (..., Tq, Tk)
  // Masked scores become -inf: weight 0 after the softmax, and a zero gradient through it. Every
  // row keeps key 0, so no row is all -inf.
  if (causal) scores = scores + causal_mask(q.size(-2), k.size(-2), scores.dtype(), q.device());
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
  // The fused path is added in the cuDNN SDPA file of kernels/cuda/ (Backend::sdpa_forward and
  // sdpa_backward; Note [Fused attention]); it will decide here from q, k, v's device, dtype and
  // sizes, causal and dropout_p. Until then the composite runs everywhere.
  (void)q;
  (void)k;
  (void)v;
  (void)causal;
  (void)dropout_p;
  return false;
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    bool causal, double scale, double dropout_p, Generator* gen) {
  // Autocast first (the products' dtype), so the fused path sees the dtype it would compute in.
  const Tensor q = amp::cast_lower(q_in), k = amp::cast_lower(k_in), v = amp::cast_lower(v_in);
  check_args(q, k, v, scale, dropout_p);
  if (sdpa_fused_applies(q, k, v, causal, dropout_p)) {
    // The fused path is added in the cuDNN SDPA file of kernels/cuda/: it returns here.
  }
  return composite(q, k, v, causal, resolve_scale(scale, q), dropout_p, gen);
}

Tensor scaled_dot_product_attention_composite(const Tensor& q_in, const Tensor& k_in,
                                              const Tensor& v_in, bool causal, double scale,
                                              double dropout_p, Generator* gen) {
  const Tensor q = amp::cast_lower(q_in), k = amp::cast_lower(k_in), v = amp::cast_lower(v_in);
  check_args(q, k, v, scale, dropout_p);
  return composite(q, k, v, causal, resolve_scale(scale, q), dropout_p, gen);
}

}  // namespace loom
