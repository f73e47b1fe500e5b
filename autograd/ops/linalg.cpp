// Differentiable matrix products. matmul reduces every case to mm or bmm:
//   (K) @ (K)       -> dot as (1, K) @ (K, 1)
//   (..., M, K) @ (K, N)       -> one mm on the flattened (... * M, K)
//   (..., M, K) @ (..., K, N)  -> bmm over the broadcast batch
// linear, gelu_mlp and linear_cross_entropy: Notes [Fused linear], [Float32 weight gradients],
// [Fused MLP], [The classifier in one node] and [The classifier in chunks] below.
#include "autograd/ops/linalg.h"

#include <algorithm>
#include <optional>

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax_loss.h"
#include "autograd/recompute.h"
#include "kernels/raw_ops.h"

namespace loom {

namespace {
// mm (dims 2) and bmm (dims 3, batched over the first): the arguments checked (check_shapes says
// whether their sizes multiply), one GEMM, and the backward dA = g B^T, dB = A^T g (transposed
// views: the GEMM reads them without a copy).
template <typename CheckShapes>
Tensor matrix_product(const char* name, int dims, const Tensor& a_in, const Tensor& b_in,
                      CheckShapes check_shapes) {
  const Tensor a = amp::cast_lower(a_in), b = amp::cast_lower(b_in);
  Backend& be = detail::check_pair(name, a, b);
  detail::check_dim(name, a, dims, "a");
  detail::check_dim(name, b, dims, "b");
  check_shapes(a, b);
  detail::check_floating(name, a);
  auto gemm = [dims](Backend& be, const Tensor& x, const Tensor& y) {
    return dims == 3 ? be.bmm(x, y) : be.mm(x, y);
  };
  Tensor out = gemm(be, a, b);
  return record(
      name, out, {a, b}, [sa = save(a, name), sb = save(b, name), dims, gemm](const Tensor& g) {
        const Tensor &a = sa.get(), &b = sb.get();
        Backend& be = backend_for(g.device());
        Tensor ga =
            needs_input_grad(0) ? gemm(be, g, raw::transpose(b, dims - 2, dims - 1)) : Tensor();
        Tensor gb =
            needs_input_grad(1) ? gemm(be, raw::transpose(a, dims - 2, dims - 1), g) : Tensor();
        return Grads{ga, gb};
      });
}
}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  return matrix_product("mm", 2, a, b, [](const Tensor& a, const Tensor& b) {
    LOOM_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.shape(), " and ", b.shape(),
               " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  });
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  return matrix_product("bmm", 3, a, b, [](const Tensor& a, const Tensor& b) {
    LOOM_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.shape(), " and ",
               b.shape(), " cannot be multiplied (expected (B, M, K) and (B, K, N))");
  });
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // Cast before the reshapes, so a parameter's cast is the cached one (Note [Autocast cast cache]).
  const Tensor a = amp::cast_lower(a_in), b = amp::cast_lower(b_in);
  detail::check_pair("matmul", a, b);
  LOOM_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ",
             a.shape(), " and ", b.shape());
  if (a.dim() == 1 && b.dim() == 1) {
    LOOM_CHECK(a.size(0) == b.size(0), "matmul: vectors of sizes ", a.size(0), " and ", b.size(0),
               " have no dot product");
    return reshape(mm(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  }
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  LOOM_CHECK(b.size(-2) == K, "matmul: shapes ", a.shape(), " and ", b.shape(),
             " cannot be multiplied (", K, " != ", b.size(-2), ")");
  if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
  if (b.dim() == 2) {  // fold a's batch dims into M
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(N);
    return reshape(mm(reshape(a, {-1, K}), b), out_shape);
  }
  Shape batch_a(a.shape().begin(), a.shape().end() - 2),
      batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes("matmul", batch_a, batch_b);
  Shape ea = batch, eb = batch, out_shape = batch;
  ea.insert(ea.end(), {M, K});
  eb.insert(eb.end(), {K, N});
  out_shape.insert(out_shape.end(), {M, N});
  Tensor a3 = reshape(expand(a, ea), {-1, M, K}), b3 = reshape(expand(b, eb), {-1, K, N});
  return reshape(bmm(a3, b3), out_shape);
}

// Note [Fused linear]
// linear is one op, not matmul + add (+ activation): forward is one Backend::linear call (on
// CUDA a single cuBLASLt GEMM whose epilogue adds the bias and applies the ReLU or the GELU), and
// backward is
//   g' = g * (y > 0)               ReLU: y > 0 exactly where the pre-activation is, so y is saved
//   g' = g * gelu_tanh'(pre)       GELU (tanh): the pre-activation, which the GEMM's "aux" output
//                                  wrote in the same pass, is saved (y is not)
//   g' = g                         no activation
//   dx = g' W,  dW = g'^T x,  db = sum of g' over rows
// with the two products reading transposed views (no copies). Two launches fewer forward per
// Linear + activation pair than the composite, one node in the graph instead of three. GPT-2's
// MLP (nn/gpt.cpp) runs its first Linear this way. Input dims before the last are folded into
// rows (a view when the strides allow it). With recomputed activations on, the GELU's y is not
// kept by the next Linear but made again from pre (Note [Recomputed activations]: the
// elementwise GELU, which on CUDA equals the epilogue's to rounding, not bit for bit).
// cuBLASLt's DGELU epilogue, which folds g' into the GEMM that makes g, belongs to the next
// layer's backward: gelu_mlp (below, Note [Fused MLP]) is the two Linears as one node that uses it.

// Note [Float32 weight gradients]
// Under autocast a Linear's float32 weight is cast to bfloat16 for the GEMM. Recorded as an op of
// its own, that cast's backward casts back to float32 the bfloat16 gradient that the
// weight-gradient GEMM wrote: the gradient rounded to 8 bits of mantissa on the way, and one more
// pass over every weight (0.39 ms a step for GPT-2 124M). linear and gelu_mlp instead cast a
// float32 leaf parameter without a graph edge (autocast's cache still makes the copy once per
// forward) and record the float32 parameter itself as their input: the weight-gradient GEMM
// reads bfloat16 and writes float32 (Backend::mm's out_dtype), and the bias's row sums are cast
// (N values). Everything else (a parameter already in bfloat16, an input, no autocast) goes
// through amp::cast_lower as usual.
namespace {

// A parameter as the kernels read it (`low`) and as the node records it (`recorded`).
struct LinearParam {
  Tensor low, recorded;
};

LinearParam linear_param(const Tensor& p) {
  if (!amp::autocast_dtype() || !p.defined() || p.dtype() != DType::F32 || !p.is_leaf() ||
      !p.requires_grad() || !autograd::is_grad_enabled()) {
    Tensor c = amp::cast_lower(p);
    return {c, c};
  }
  NoGradGuard no_graph;  // the copy, without the cast's node
  return {amp::cast_lower(p), p};
}

// dW (N, K) and db (N) of a Linear from g' (M, N) and its input x (M, K), in the dtypes of the
// tensors the node recorded (wt, bt), each only when needed (undefined otherwise); db is in the
// result only when the Linear has a bias (bt defined).
Grads weight_and_bias_grads(Backend& be, const Tensor& gp, const Tensor& x, bool need_weight,
                            bool need_bias, DType wt, std::optional<DType> bt) {
  Grads out{need_weight ? be.mm(raw::transpose(gp, 0, 1), x, wt) : Tensor()};
  if (bt)
    out.push_back(need_bias ? raw::cast(be.reduce(ReduceOp::Sum, gp, {0}, false), *bt) : Tensor());
  return out;
}

std::optional<DType> dtype_of(const Tensor& t) {
  return t.defined() ? std::optional<DType>(t.dtype()) : std::nullopt;
}

// The activation's backward, g (M, N) -> g' (see the Note); `kept` is y (ReLU) or pre (GELU).
Tensor activation_grad(Backend& be, LinearActivation act, const Tensor& g, const Tensor& kept) {
  if (act == LinearActivation::Relu) return be.binary(BinaryOp::ReluBackward, g, kept);
  if (act == LinearActivation::GeluTanh) return be.binary(BinaryOp::GeluTanhBackward, g, kept);
  return g;
}

// The checks of one Linear's arguments (after autocast's casts); errors name `op`.
Backend& check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Backend& be = detail::check_pair(op, x, weight);
  detail::check_dim(op, weight, 2, "weight");
  detail::check_floating(op, x);
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), op, ": input ", x.shape(), " has ",
             x.dim() ? x.size(-1) : 0, " features, weight ", weight.shape(), " expects ",
             weight.size(1));
  if (bias.defined()) {
    detail::check_pair(op, x, bias);
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias ", bias.shape(),
               " does not match weight ", weight.shape(), " (expected (", weight.size(0), "))");
  }
  return be;
}

// y (M, N) as x's leading dims followed by N.
Tensor unfold_rows(const Tensor& y, const Tensor& x, int64_t N) {
  if (x.dim() == 2) return y;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  return reshape(y, out_shape);
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              LinearActivation act) {
  const Tensor x = amp::cast_lower(x_in);
  const LinearParam wp = linear_param(weight_in), bp = linear_param(bias_in);
  const Tensor &weight = wp.low, &bias = bp.low;
  Backend& be = check_linear("linear", x, weight, bias);
  const int64_t K = weight.size(1), N = weight.size(0);
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, K});  // (M, K)
  LinearOut out = be.linear(x2, weight, bias, act);          // y, pre: (M, N)
  const Tensor kept = act == LinearActivation::Relu       ? out.y
                      : act == LinearActivation::GeluTanh ? out.pre
                                                          : Tensor();
  std::vector<Tensor> inputs{x2, wp.recorded};
  if (bias.defined()) inputs.push_back(bp.recorded);
  autograd::Saved sk = kept.defined() ? save(kept, "linear") : autograd::Saved();
  if (act == LinearActivation::GeluTanh)  // y from the kept pre-activation (Note [Fused linear])
    autograd::offer_recompute("linear", out.y, inputs, [sk] {
      const Tensor& pre = sk.get();
      return backend_for(pre.device()).unary(UnaryOp::GeluTanh, pre);
    });
  Tensor y = record("linear", out.y, inputs,
                    [sx = save(x2, "linear"), sw = save(weight, "linear"), sk, act,
                     wt = wp.recorded.dtype(), bt = dtype_of(bp.recorded)](const Tensor& g) {
                      const Tensor &xs = sx.get(), &w = sw.get();
                      Backend& be = backend_for(g.device());
                      const Tensor gp =
                          activation_grad(be, act, g, sk.defined() ? sk.get() : Tensor());
                      Grads grads{needs_input_grad(0) ? be.mm(gp, w) : Tensor()};
                      for (Tensor& t : weight_and_bias_grads(be, gp, xs, needs_input_grad(1),
                                                             bt && needs_input_grad(2), wt, bt))
                        grads.push_back(std::move(t));
                      return grads;
                    });
  return unfold_rows(y, x, N);
}

// Note [Fused MLP]
// gelu_mlp is GPT-2's MLP, c_proj(gelu_tanh(c_fc(x))), as one node. Forward is the two fused
// Linears (the first with the bias + GELU epilogue writing the pre-activation too). Backward:
//   dW2 = g^T h,  db2 = sum of g's rows      as linear's
//   g1 = (g W2) * gelu_tanh'(pre)            one GEMM with cuBLASLt's DGELU epilogue
//   db1 = sum of g1's rows                   (Backend::mm_gelu_tanh_backward)
//   dx = g1 W1,  dW1 = g1^T x                as linear's
// Written as linear(linear(x, w1, b1, GeluTanh), w2, b2) the GELU's backward is its own pass over
// the (M, 4C) gradient (read g W2 and pre, write g1: 1.15 ms a step in GPT-2 124M's profile),
// because the GEMM that makes g W2 belongs to the other node. h =
// gelu(pre) is saved for dW2, or with recomputed activations made again from pre (Note
// [Recomputed activations]). Values and gradients are the composite's to rounding (the CPU runs
// the composite's very kernels). Tried and left out, measured on an H200 (cuBLASLt 13) with
// GPT-2 124M: the bias-gradient epilogues, BGRADB in the weight-gradient GEMMs (a separate kernel,
// 1.14 ms a step against 0.98 ms for loom's column sums) and DGELU_BGRAD (a plain GEMM plus a
// separate epilogue kernel: 3.9 ms a step against 2.0 ms for DGELU).
Tensor gelu_mlp(const Tensor& x_in, const Tensor& w1_in, const Tensor& b1_in, const Tensor& w2_in,
                const Tensor& b2_in) {
  const Tensor x = amp::cast_lower(x_in);
  const LinearParam w1p = linear_param(w1_in), b1p = linear_param(b1_in), w2p = linear_param(w2_in),
                    b2p = linear_param(b2_in);
  const Tensor &w1 = w1p.low, &b1 = b1p.low, &w2 = w2p.low, &b2 = b2p.low;
  Backend& be = check_linear("gelu_mlp", x, w1, b1);
  detail::check_dim("gelu_mlp", w2, 2, "second weight");
  LOOM_CHECK(w2.size(1) == w1.size(0), "gelu_mlp: second weight ", w2.shape(), " expects ",
             w2.size(1), " features, the first Linear makes ", w1.size(0), " (weight ", w1.shape(),
             ")");
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, w1.size(1)});  // (M, C)
  LinearOut l1 = be.linear(x2, w1, b1, LinearActivation::GeluTanh);   // h, pre: (M, H)
  check_linear("gelu_mlp", l1.y, w2, b2);
  LinearOut l2 = be.linear(l1.y, w2, b2, LinearActivation::None);  // (M, N)
  std::vector<Tensor> inputs{x2, w1p.recorded};
  if (b1.defined()) inputs.push_back(b1p.recorded);
  inputs.push_back(w2p.recorded);
  if (b2.defined()) inputs.push_back(b2p.recorded);
  autograd::Saved sp = save(l1.pre, "gelu_mlp");
  autograd::offer_recompute("gelu_mlp", l1.y, inputs, [sp] {
    const Tensor& pre = sp.get();
    return backend_for(pre.device()).unary(UnaryOp::GeluTanh, pre);
  });
  const size_t i_w2 = b1.defined() ? 3 : 2;  // inputs: x, w1, [b1], w2, [b2]
  Tensor y = record(
      "gelu_mlp", l2.y, inputs,
      [sx = save(x2, "gelu_mlp"), sw1 = save(w1, "gelu_mlp"), sw2 = save(w2, "gelu_mlp"),
       sh = save(l1.y, "gelu_mlp"), sp, w1t = w1p.recorded.dtype(), b1t = dtype_of(b1p.recorded),
       w2t = w2p.recorded.dtype(), b2t = dtype_of(b2p.recorded), i_w2](const Tensor& g) {
        Backend& be = backend_for(g.device());
        Grads out(size_t(3 + int(bool(b1t)) + int(bool(b2t))));
        Grads g2 = weight_and_bias_grads(be, g, sh.get(), needs_input_grad(i_w2),
                                         b2t && needs_input_grad(i_w2 + 1), w2t, b2t);
        std::move(g2.begin(), g2.end(), out.begin() + long(i_w2));
        if (needs_input_grad(0) || needs_input_grad(1) || (b1t && needs_input_grad(2))) {
          GeluBackwardOut g1 = be.mm_gelu_tanh_backward(g, sw2.get(), sp.get(),
                                                        b1t && needs_input_grad(2));  // (M, H)
          if (needs_input_grad(0)) out[0] = be.mm(g1.grad, sw1.get());
          if (needs_input_grad(1)) out[1] = be.mm(raw::transpose(g1.grad, 0, 1), sx.get(), w1t);
          if (b1t) out[2] = g1.bias.defined() ? raw::cast(g1.bias, *b1t) : Tensor();
        }
        return out;
      });
  return unfold_rows(y, x, w2.size(0));
}

// Note [The classifier in one node]
// linear_cross_entropy is a language model's output Linear and its loss,
// cross_entropy(x W^T, target), as one node. Forward makes the (M, V) logits with one GEMM, then
// Backend::cross_entropy_with_grad_ writes the loss and, over the logits, G = d(sum of the rows'
// losses)/dlogits (on CUDA one read and one write of each row: Note [Cross-entropy and its
// gradient in one pass] in kernels/cuda/loss/cuda_cross_entropy.cu). Backward, with g the loss's
// gradient and m = g * scale (scale = 1 / rows counted for Mean, 1 for Sum; 0-d, on the device):
//   dx = m (G W),   dW = m (G^T x)
// Composed, cross_entropy reads the logits in forward and reads and writes them again in
// backward (Note [Fused cross-entropy]); here they are read and written once, in forward, and
// never leave the node. The values are the composite's to rounding (G is rounded to the logits'
// dtype, G W once more before m is applied). Without a gradient to make (no grad mode, nothing
// requiring one) and for Reduction::None it is the composite itself.
//
// Note [The classifier in chunks]
// The logits are the largest tensor of a language model's step (GPT-2 124M: 16384 x 50304
// bfloat16, 1.65 GB, more than the twelve layers' GELU outputs), and the node never needs them
// whole: a row's loss and gradient depend on that row alone. So forward walks the rows in chunks
// of R (detail::classifier_chunk_rows: logits of at most 3 x 2^27 elements, 768 MiB in bfloat16)
// and, for each chunk, does backward's two products with G_c at once, then drops it:
//   G_c = x_c W^T                (R, V)  the chunk's logits, then its G (as above)
//   P[chunk's rows] = G_c W      (R, C)  Backend::mm_into_ straight into P's rows
//   Q += G_c^T x_c               (V, C)  mm_into_ with accumulate (the first chunk writes)
// Backward is then dx = m P and dW = m Q. Peak memory: one chunk's logits plus P and Q (Q in the
// weight's recorded dtype: float32 for a float32 weight under autocast, Note [Float32 weight
// gradients]) instead of all the logits. Time: the same products, R rows at a time; each chunk
// after the first adds a read and a write of Q (float32, 154 MB for GPT-2) to its product, and
// short chunks make dx's product split K, so fewer, larger chunks are faster. Measured on an
// H200 with GPT-2 124M (B 16, T 1024, logits 16384 x 50304): one chunk 32.11 ms a step and a
// peak of 8680 MiB, 3 chunks (this rule) 32.15 ms and 7632 MiB, 7 chunks of 2^27 logits 32.54 ms
// and 7346 MiB. The price: the products run even when no backward follows (a loss computed in
// grad mode and dropped), and a second backward (retain_graph) scales copies of P and Q. With
// more than one chunk each chunk's loss is its rows' Sum and the Mean's 1 / count is counted
// from the targets (classifier_mean_scale).
namespace {

constexpr int64_t kClassifierChunkElements = int64_t(3) << 27;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 1 / (rows whose target is not ignore_index): 0-d float64 on target's device, the Mean's scale
// (infinite when every row is ignored, so the loss is NaN, as cross_entropy's).
Tensor classifier_mean_scale(Backend& be, const Tensor& target, int64_t ignore_index) {
  const Tensor counted = raw::cast(
      be.binary_scalar(BinaryOp::Ne, target, double(ignore_index), false), DType::F64);  // (M)
  return be.binary_scalar(BinaryOp::Div, be.reduce(ReduceOp::Sum, counted, {0}, false), 1.0, true);
}

// What forward leaves for backward: P = G W (when x needs a gradient), Q = G^T x (when the
// weight does), and the Mean's scale.
struct ClassifierGrads {
  Tensor p, q, scale;
  Tensor loss;  // 0-d float32 (float64 for f64 logits)
};

// The chunked forward of the Note: x2 (M, C), w (V, C), target (M); q_dtype is dW's dtype.
ClassifierGrads classifier_forward(Backend& be, const Tensor& x2, const Tensor& w,
                                   const Tensor& target, Reduction r, double ls, int64_t ignore,
                                   int64_t chunk_rows, bool need_p, bool need_q, DType q_dtype) {
  const int64_t M = x2.size(0), C = x2.size(1), V = w.size(0);
  const int64_t R = std::max<int64_t>(
      1, chunk_rows > 0 ? std::min(chunk_rows, M) : detail::classifier_chunk_rows(M, V));
  const bool one_chunk = R >= M;
  ClassifierGrads out;
  if (need_p) out.p = empty({M, C}, {.dtype = x2.dtype(), .device = x2.device()});
  if (need_q) out.q = empty({V, C}, {.dtype = q_dtype, .device = x2.device()});
  for (int64_t start = 0; start == 0 || start < M; start += R) {
    const int64_t end = std::min(start + R, M);
    const Tensor xc = raw::slice(x2, 0, start, end, 1);               // (R, C)
    Tensor g = be.linear(xc, w, Tensor(), LinearActivation::None).y;  // logits (R, V)
    CrossEntropyOut ce = be.cross_entropy_with_grad_(g, raw::slice(target, 0, start, end, 1),
                                                     one_chunk ? r : Reduction::Sum, ls, ignore);
    if (need_p) be.mm_into_(raw::slice(out.p, 0, start, end, 1), g, w, false);
    if (need_q) be.mm_into_(out.q, raw::transpose(g, 0, 1), xc, start > 0);
    out.loss = start == 0 ? ce.loss : be.binary(BinaryOp::Add, out.loss, ce.loss);
    if (one_chunk) out.scale = ce.scale;
  }
  if (!one_chunk && r == Reduction::Mean) {
    out.scale = classifier_mean_scale(be, target, ignore);
    out.loss = raw::cast(be.binary(BinaryOp::Mul, raw::cast(out.loss, DType::F64), out.scale),
                         out.loss.dtype());
  } else if (!one_chunk) {
    out.scale = empty({}, {.dtype = DType::F64, .device = x2.device()});
    be.fill_(out.scale, 1.0);
  }
  return out;
}

// t * m: in place when the engine frees the node's saved state after this backward, else on a
// copy (retain_graph).
Tensor scaled(Backend& be, const Tensor& t, const Tensor& m) {
  Tensor out = saved_tensors_freed_after() ? t : t.clone();
  be.scale_by_({out}, m);
  return out;
}

}  // namespace

namespace detail {
int64_t classifier_chunk_rows(int64_t M, int64_t V) {
  const int64_t chunks = std::max<int64_t>(1, ceil_div(M * V, kClassifierChunkElements));
  return chunks == 1 ? M : ceil_div(ceil_div(M, chunks), 8) * 8;
}
}  // namespace detail

Tensor linear_cross_entropy(const Tensor& x_in, const Tensor& weight_in, const Tensor& target_in,
                            Reduction r, double label_smoothing, int64_t ignore_index,
                            int64_t chunk_rows) {
  if (r == Reduction::None || !autograd::any_requires_grad({x_in, weight_in})) {
    const Tensor logits = linear(x_in, weight_in);
    return cross_entropy(logits.dim() == 2 ? logits : flatten(logits, 0, -2), flatten(target_in), r,
                         label_smoothing, ignore_index);
  }
  const Tensor x = amp::cast_lower(x_in);
  const LinearParam wp = linear_param(weight_in);
  const Tensor& w = wp.low;
  Backend& be = check_linear("linear_cross_entropy", x, w, Tensor());
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, w.size(1)});  // (M, C)
  const Tensor target = flatten(target_in);                          // (M)
  LOOM_CHECK(target.dtype() == DType::I64 && target.size(0) == x2.size(0) &&
                 target.device() == x2.device(),
             "linear_cross_entropy: target ", describe(target_in), " must be int64 on ",
             x2.device(), " with one class per row of the input ", describe(x_in));
  LOOM_CHECK(label_smoothing >= 0.0 && label_smoothing < 1.0,
             "linear_cross_entropy: label_smoothing must be in [0, 1), got ", label_smoothing);
  LOOM_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0 (0 picks it), got ",
             chunk_rows);
  const bool need_p = autograd::any_requires_grad({x_in});
  const bool need_q = autograd::any_requires_grad({weight_in});
  ClassifierGrads f = classifier_forward(be, x2, w, target, r, label_smoothing, ignore_index,
                                         chunk_rows, need_p, need_q, wp.recorded.dtype());
  const DType factor = x2.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor loss = record("linear_cross_entropy", f.loss, {x2, wp.recorded},
                       [p = f.p, q = f.q, scale = f.scale, factor](const Tensor& g) {
                         Backend& be = backend_for(g.device());
                         const Tensor m = raw::cast(
                             be.binary(BinaryOp::Mul, raw::cast(g, DType::F64), scale), factor);
                         Grads out(2);
                         if (needs_input_grad(0) && p.defined()) out[0] = scaled(be, p, m);
                         if (needs_input_grad(1) && q.defined()) out[1] = scaled(be, q, m);
                         return out;
                       });
  const bool low = x2.dtype() == DType::F16 || x2.dtype() == DType::BF16;
  return low && !amp::is_autocast_enabled() ? loss.to(x2.dtype()) : loss;  // as cross_entropy
}

}  // namespace loom
