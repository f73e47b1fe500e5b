// Differentiable softmax, log_softmax and the losses: nll_loss, cross_entropy, mse_loss.
// softmax/log_softmax/nll_loss have fused kernels (forward and backward side by side here);
// cross_entropy is fused for many classes and the composite of log_softmax and nll_loss for few
// (Note [Fused cross-entropy]); mse_loss is a composite whose gradient comes from its parts.
// Leaves out: class weights, soft (probability) targets, and K-dimensional (N, C, d1, ...) losses.
#include "autograd/ops/softmax_loss.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce.h"
#include "core/out_of_memory.h"
#include "kernels/raw_ops.h"

namespace loom {

namespace {

Tensor softmax_impl(const char* name, const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = amp::cast_fp32(x_in);
  detail::check_defined(name, x);
  detail::check_floating(name, x);
  if (x.dim() > 0) dim = wrap_dim(name, dim, x.dim());
  Tensor out = backend_for(x.device()).softmax(x, dim, log);
  return record(name, out, {x}, [sy = save(out, name), dim, log](const Tensor& g) {
    return Grads{backend_for(g.device()).softmax_backward(g, sy.get(), dim, log)};
  });
}

// The checks nll_loss and cross_entropy share: scores (N, C) floating, target (N) int64 on the
// same device. `what` names the scores ("logp" or "logits").
void check_class_target(const char* op, const char* what, const Tensor& scores,
                        const Tensor& target) {
  detail::check_defined(op, scores, what);
  detail::check_defined(op, target, "target");
  detail::check_floating(op, scores);
  LOOM_CHECK(scores.dim() == 2, op, ": expected ", what, " of shape (N, C), got ",
             describe(scores));
  LOOM_CHECK(target.dtype() == DType::I64, op, ": target must hold int64 class indices, got ",
             describe(target));
  LOOM_CHECK(target.dim() == 1, op, ": target must be 1-d (N), got ", describe(target));
  LOOM_CHECK(target.size(0) == scores.size(0), op, ": ", what, " ", describe(scores),
             " has N = ", scores.size(0), " rows but target ", describe(target), " has ",
             target.size(0));
  LOOM_CHECK(target.device() == scores.device(), op, ": target ", describe(target),
             " is not on the device of ", what, " ", describe(scores));
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl("log_softmax", x, dim, true);
}

namespace {

// nll_loss under the name of the op the user called (nll_loss, or cross_entropy around it), so a
// bad target is reported under that name even when a GPU kernel finds it
// (kernels/backend_methods.inc).
Tensor nll_loss_as(const char* op, const Tensor& logp, const Tensor& target, Reduction r,
                   int64_t ignore_index) {
  Tensor out = backend_for(logp.device()).nll_loss(logp, target, r, ignore_index, op);
  return record(
      "nll_loss", out, {logp},
      [sp = save(logp, "nll_loss"), st = save(target, "nll_loss"), r, ignore_index,
       op](const Tensor& g) {
        return Grads{
            backend_for(g.device()).nll_loss_backward(g, sp.get(), st.get(), r, ignore_index, op)};
      });
}

}  // namespace

Tensor nll_loss(const Tensor& logp_in, const Tensor& target, Reduction r, int64_t ignore_index) {
  const Tensor logp = amp::cast_fp32(logp_in);
  check_class_target("nll_loss", "logp", logp, target);
  return nll_loss_as("nll_loss", logp, target, r, ignore_index);
}

namespace {

// Note [Label smoothing]
// As in PyTorch, with label smoothing ls and C classes the per-row loss is
//   (1 - ls) * nll_i + (ls / C) * sum_c (-logp_ic),
// the smoothing term being 0 on ignored rows. Reduction::Mean divides both terms by the number
// of non-ignored rows; that count stays a tensor so no value is read back to the host.

// The composite: log_softmax, then nll_loss and the smoothing term (the reference of the fused
// version, and what runs when that does not apply).
Tensor cross_entropy_composite(const Tensor& logits, const Tensor& target, Reduction r,
                               double label_smoothing, int64_t ignore_index) {
  Tensor logp = log_softmax(logits, 1);
  Tensor nll;
  try {
    nll = nll_loss_as("cross_entropy", logp, target, r, ignore_index);
  } catch (const OutOfMemoryError&) {
    throw;  // keeps its type (and says nothing of logp)
  } catch (const Error& e) {
    // The backend checked log_softmax(logits), which it calls logp: say logits, as the user did.
    std::string msg = e.what();
    for (size_t at = msg.find(" for logp "); at != std::string::npos;
         at = msg.find(" for logp ", at))
      msg.replace(at, 10, " for logits ");
    throw Error(msg);
  }
  if (label_smoothing == 0.0) return nll;
  Backend& be = backend_for(logits.device());
  // keep_i = 1 for rows that count, 0 for ignored rows (no gradient flows into it).
  Tensor keep = raw::cast(be.binary_scalar(BinaryOp::Ne, target, double(ignore_index), false),
                          logits.dtype());
  Tensor smooth = neg(sum(logp, {1})) * keep;  // (N)
  if (r == Reduction::Sum) smooth = sum(smooth);
  if (r == Reduction::Mean) smooth = sum(smooth) / sum(keep);
  double C = double(logits.size(1));
  return nll * (1.0 - label_smoothing) + smooth * (label_smoothing / C);
}

}  // namespace

// Note [Fused cross-entropy]
// Composed, cross_entropy is log_softmax then nll_loss (and the smoothing term): on CUDA two
// forward kernels and three backward ones (softmax, nll; the Mean's row count, nll's gradient,
// softmax's gradient) and two autograd nodes, the (N, C) log-probabilities kept for backward.
// Fused (Backend::cross_entropy) it is one pass over the logits each way and one node, and it
// keeps only each row's log-sum-exp: backward recomputes softmax = exp(logit - lse) and writes
//   dL/dlogit_ic = g_i * scale * (softmax_ic - (1 - ls) [c == t_i] - ls / C)
// (0 on ignored rows; scale = 1 / rows counted for Mean). A Mean or Sum adds the rows' losses in
// a fixed order (deterministic). Fused, float16/bfloat16 logits are read as they are (float32
// sums), where the composite under autocast first copies them to float32. When nothing else holds
// the logits and the graph is not retained, backward writes the gradient over them (reusable).
// Which runs: the fused kernels for C >= kFusedMinClasses classes, always with
// set_fused_cross_entropy(true) (or LOOM_FUSED_CROSS_ENTROPY=1), the composite otherwise.
// - Many classes: a language model's (B*T, V) logits. For GPT-2's B*T = 16384 rows of V = 50304
//   in bfloat16 the composite moves about 30 GB (the float32 copy, log-probabilities, their
//   gradient, the softmax gradient, the cast back) and holds 3.3 GB of log-probabilities; fused,
//   about 5 GB, and nothing of (N, C) but the logits (docs/perf.md has the step it saved).
// - Few classes: on an H200 (2026-12-01, bench_train mlp, 256 x 10 logits, the two alternating in
//   one call) the whole step as a CUDA graph took 0.157-0.158 ms fused against 0.151-0.152 ms
//   composed, and eager 0.171-0.177 against 0.166-0.170 ms: tiny rows are latency-bound, and the
//   launches fusion saves are not what the step waits on. On the 2-core CPU the mlp step did not
//   move (23.5-24.7 against 23.3-24.3 ms).
namespace {
constexpr int64_t kFusedMinClasses = 1024;
// LOOM_FUSED_CROSS_ENTROPY=1 in the environment starts with the fused kernels (for A/B timings).
std::atomic<bool> g_fused{[] {
  const char* v = std::getenv("LOOM_FUSED_CROSS_ENTROPY");
  return v && std::string_view(v) == "1";
}()};

// Whether backward may write the logits' gradient over the saved logits x: the graph is freed
// after this backward (no retain_graph), and nothing but the saved alias holds x's memory (the
// user dropped the logits, no view of them is alive). Then a language model's (B T, V) gradient
// needs no memory of its own: 1.6 GB for GPT-2 at B = 16, T = 1024.
bool reusable(const Tensor& x) {
  return saved_tensors_freed_after() && x.is_contiguous() && x.impl_ptr().use_count() == 1 &&
         x.storage().use_count() == 1;
}

Tensor cross_entropy_fused(const Tensor& logits, const Tensor& target, Reduction r,
                           double label_smoothing, int64_t ignore_index) {
  CrossEntropyOut out =
      backend_for(logits.device()).cross_entropy(logits, target, r, label_smoothing, ignore_index);
  Tensor loss = record(
      "cross_entropy", out.loss, {logits},
      [sx = save(logits, "cross_entropy"), st = save(target, "cross_entropy"), lse = out.lse,
       scale = out.scale, r, label_smoothing, ignore_index](const Tensor& g) {
        const Tensor& x = sx.get();
        return Grads{backend_for(g.device())
                         .cross_entropy_backward(g, x, st.get(), lse, scale, r, label_smoothing,
                                                 ignore_index, reusable(x) ? x : Tensor())};
      });
  // The composite's dtype: float32 under autocast, else the logits' own.
  const bool low = logits.dtype() == DType::F16 || logits.dtype() == DType::BF16;
  return low && !amp::is_autocast_enabled() ? loss.to(logits.dtype()) : loss;
}

}  // namespace

void set_fused_cross_entropy(bool on) { g_fused.store(on); }
bool fused_cross_entropy() { return g_fused.load(); }

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, Reduction r,
                     double label_smoothing, int64_t ignore_index) {
  check_class_target("cross_entropy", "logits", logits_in, target);
  LOOM_CHECK(label_smoothing >= 0.0 && label_smoothing < 1.0,
             "cross_entropy: label_smoothing must be in [0, 1), got ", label_smoothing);
  if (fused_cross_entropy() || logits_in.size(1) >= kFusedMinClasses)
    return cross_entropy_fused(logits_in, target, r, label_smoothing, ignore_index);
  return cross_entropy_composite(amp::cast_fp32(logits_in), target, r, label_smoothing,
                                 ignore_index);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction r) {
  const Tensor input = amp::cast_fp32(input_in), target = amp::cast_fp32(target_in);
  detail::check_pair("mse_loss", input, target);
  detail::check_floating("mse_loss", input);
  LOOM_CHECK(input.shape() == target.shape(), "mse_loss: input ", describe(input), " and target ",
             describe(target), " must have the same shape");
  Tensor sq = square(input - target);
  if (r == Reduction::Mean) return mean(sq);
  if (r == Reduction::Sum) return sum(sq);
  return sq;
}

}  // namespace loom
