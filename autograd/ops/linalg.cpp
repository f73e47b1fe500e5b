// Differentiable matrix products. matmul reduces every case to mm or bmm:
//   (K) @ (K)       -> dot as (1, K) @ (K, 1)
//   (..., M, K) @ (K, N)       -> one mm on the flattened (... * M, K)
//   (..., M, K) @ (..., K, N)  -> bmm over the broadcast batch
#include "autograd/ops/linalg.h"

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/shape.h"
#include "autograd/recompute.h"
#include "kernels/raw_ops.h"

namespace loom {

Tensor mm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = amp::cast_lower(a_in), b = amp::cast_lower(b_in);
  Backend& be = detail::check_pair("mm", a, b);
  detail::check_dim("mm", a, 2, "a");
  detail::check_dim("mm", b, 2, "b");
  LOOM_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.shape(), " and ", b.shape(),
             " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  detail::check_floating("mm", a);
  Tensor out = be.mm(a, b);
  return record("mm", out, {a, b}, [sa = save(a, "mm"), sb = save(b, "mm")](const Tensor& g) {
    // dA = g B^T, dB = A^T g (transposed views: the GEMM reads them without a copy)
    const Tensor &a = sa.get(), &b = sb.get();
    Backend& be = backend_for(g.device());
    Tensor ga = needs_input_grad(0) ? be.mm(g, raw::transpose(b, 0, 1)) : Tensor();
    Tensor gb = needs_input_grad(1) ? be.mm(raw::transpose(a, 0, 1), g) : Tensor();
    return Grads{ga, gb};
  });
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = amp::cast_lower(a_in), b = amp::cast_lower(b_in);
  Backend& be = detail::check_pair("bmm", a, b);
  detail::check_dim("bmm", a, 3, "a");
  detail::check_dim("bmm", b, 3, "b");
  LOOM_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.shape(), " and ",
             b.shape(), " cannot be multiplied (expected (B, M, K) and (B, K, N))");
  detail::check_floating("bmm", a);
  Tensor out = be.bmm(a, b);
  return record("bmm", out, {a, b}, [sa = save(a, "bmm"), sb = save(b, "bmm")](const Tensor& g) {
    const Tensor &a = sa.get(), &b = sb.get();
    Backend& be = backend_for(g.device());
    Tensor ga = needs_input_grad(0) ? be.bmm(g, raw::transpose(b, 1, 2)) : Tensor();
    Tensor gb = needs_input_grad(1) ? be.bmm(raw::transpose(a, 1, 2), g) : Tensor();
    return Grads{ga, gb};
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
// Left out: cuBLASLt's DGELU epilogue, which would fold g' into the GEMM that makes g, in the next
// layer's backward (a fusion across two nodes).
namespace {

// The activation's backward, g (M, N) -> g' (see the Note); `kept` is y (ReLU) or pre (GELU).
Tensor activation_grad(Backend& be, LinearActivation act, const Tensor& g, const Tensor& kept) {
  if (act == LinearActivation::Relu) return be.binary(BinaryOp::ReluBackward, g, kept);
  if (act == LinearActivation::GeluTanh) return be.binary(BinaryOp::GeluTanhBackward, g, kept);
  return g;
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              LinearActivation act) {
  const Tensor x = amp::cast_lower(x_in), weight = amp::cast_lower(weight_in),
               bias = amp::cast_lower(bias_in);
  Backend& be = detail::check_pair("linear", x, weight);
  detail::check_dim("linear", weight, 2, "weight");
  detail::check_floating("linear", x);
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.shape(), " has ",
             x.dim() ? x.size(-1) : 0, " features, weight ", weight.shape(), " expects ",
             weight.size(1));
  if (bias.defined()) {
    detail::check_pair("linear", x, bias);
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.shape(),
               " does not match weight ", weight.shape(), " (expected (", weight.size(0), "))");
  }
  const int64_t K = weight.size(1), N = weight.size(0);
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, K});  // (M, K)
  LinearOut out = be.linear(x2, weight, bias, act);          // y, pre: (M, N)
  const Tensor kept = act == LinearActivation::Relu       ? out.y
                      : act == LinearActivation::GeluTanh ? out.pre
                                                          : Tensor();
  std::vector<Tensor> inputs{x2, weight};
  if (bias.defined()) inputs.push_back(bias);
  autograd::Saved sk = kept.defined() ? save(kept, "linear") : autograd::Saved();
  if (act == LinearActivation::GeluTanh)  // y from the kept pre-activation (Note [Fused linear])
    autograd::offer_recompute("linear", out.y, inputs, [sk] {
      const Tensor& pre = sk.get();
      return backend_for(pre.device()).unary(UnaryOp::GeluTanh, pre);
    });
  Tensor y =
      record("linear", out.y, inputs,
             [sx = save(x2, "linear"), sw = save(weight, "linear"), sk, act,
              has_bias = bias.defined()](const Tensor& g) {
               const Tensor &xs = sx.get(), &w = sw.get();
               Backend& be = backend_for(g.device());
               const Tensor gp = activation_grad(be, act, g, sk.defined() ? sk.get() : Tensor());
               Grads grads{needs_input_grad(0) ? be.mm(gp, w) : Tensor(),
                           needs_input_grad(1) ? be.mm(raw::transpose(gp, 0, 1), xs) : Tensor()};
               if (has_bias)
                 grads.push_back(needs_input_grad(2) ? be.reduce(ReduceOp::Sum, gp, {0}, false)
                                                     : Tensor());
               return grads;
             });
  if (x.dim() == 2) return y;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  return reshape(y, out_shape);
}

}  // namespace loom
