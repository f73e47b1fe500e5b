// Differentiable elementwise ops: forward (one backend call) and backward side by side.
// Gradients of broadcast inputs are summed back to the input's shape with sum_to.
#include "autograd/ops/elementwise.h"

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/recompute.h"
#include "kernels/raw_ops.h"

namespace loom {

using detail::check_pair;

// ---------------------------------------------------------------- binary

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  amp::promote(a, b);
  Tensor out = check_pair("add", a, b).binary(BinaryOp::Add, a, b);
  return record("add", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return Grads{sum_to(g, sa), sum_to(g, sb)};
  });
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  amp::promote(a, b);
  Tensor out = check_pair("sub", a, b).binary(BinaryOp::Sub, a, b);
  return record("sub", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return Grads{sum_to(g, sa), sum_to(neg(g), sb)};
  });
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  amp::promote(a, b);
  Tensor out = check_pair("mul", a, b).binary(BinaryOp::Mul, a, b);
  return record("mul", out, {a, b}, [sa = save(a, "mul"), sb = save(b, "mul")](const Tensor& g) {
    const Tensor &a = sa.get(), &b = sb.get();
    return Grads{sum_to(g * b, a.shape()), sum_to(g * a, b.shape())};
  });
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  amp::promote(a, b);
  Tensor out = check_pair("div", a, b).binary(BinaryOp::Div, a, b);
  return record("div", out, {a, b}, [sa = save(a, "div"), sb = save(b, "div")](const Tensor& g) {
    const Tensor &a = sa.get(), &b = sb.get();
    Tensor ga = g / b;
    return Grads{sum_to(ga, a.shape()), sum_to(neg(ga * a / b), b.shape())};
  });
}

Tensor pow(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = amp::cast_fp32(a_in), b = amp::cast_fp32(b_in);
  Tensor out = check_pair("pow", a, b).binary(BinaryOp::Pow, a, b);
  return record("pow", out, {a, b},
                [sa = save(a, "pow"), sb = save(b, "pow"), so = save(out, "pow")](const Tensor& g) {
                  const Tensor &a = sa.get(), &b = sb.get(), &y = so.get();
                  // d/da a^b = b a^(b-1); d/db a^b = a^b log a
                  Tensor ga = g * b * pow(a, b - 1.0);
                  Tensor gb = g * y * log(a);
                  return Grads{sum_to(ga, a.shape()), sum_to(gb, b.shape())};
                });
}

namespace {
// maximum/minimum: the gradient goes to the input that was selected (a on ties).
Tensor select_extreme(const char* name, BinaryOp op, BinaryOp pick_a, const Tensor& a_in,
                      const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  amp::promote(a, b);
  Tensor out = check_pair(name, a, b).binary(op, a, b);
  return record(name, out, {a, b},
                [sa = save(a, name), sb = save(b, name), pick_a](const Tensor& g) {
                  const Tensor &a = sa.get(), &b = sb.get();
                  Tensor take_a = backend_for(a.device()).binary(pick_a, a, b);
                  Tensor z = zeros_like(g);
                  return Grads{sum_to(where(take_a, g, z), a.shape()),
                               sum_to(where(take_a, z, g), b.shape())};
                });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return select_extreme("maximum", BinaryOp::Maximum, BinaryOp::Ge, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return select_extreme("minimum", BinaryOp::Minimum, BinaryOp::Le, a, b);
}

// ---------------------------------------------------------------- with a scalar

Tensor add(const Tensor& a, double s) {
  detail::check_defined("add", a);
  Tensor out = backend_for(a.device()).binary_scalar(BinaryOp::Add, a, s, false);
  return record("add", out, {a}, [](const Tensor& g) { return Grads{g}; });
}

Tensor sub(const Tensor& a, double s) { return add(a, -s); }

Tensor rsub(const Tensor& a, double s) {
  detail::check_defined("rsub", a);
  Tensor out = backend_for(a.device()).binary_scalar(BinaryOp::Sub, a, s, true);
  return record("rsub", out, {a}, [](const Tensor& g) { return Grads{neg(g)}; });
}

Tensor mul(const Tensor& a, double s) {
  detail::check_defined("mul", a);
  Tensor out = backend_for(a.device()).binary_scalar(BinaryOp::Mul, a, s, false);
  return record("mul", out, {a}, [s](const Tensor& g) { return Grads{g * s}; });
}

Tensor div(const Tensor& a, double s) {
  detail::check_defined("div", a);
  Tensor out = backend_for(a.device()).binary_scalar(BinaryOp::Div, a, s, false);
  return record("div", out, {a}, [s](const Tensor& g) { return Grads{g / s}; });
}

Tensor rdiv(const Tensor& a, double s) {
  detail::check_defined("rdiv", a);
  Tensor out = backend_for(a.device()).binary_scalar(BinaryOp::Div, a, s, true);
  // d/da (s / a) = -s / a^2 = -out / a
  return record("rdiv", out, {a}, [sa = save(a, "rdiv"), so = save(out, "rdiv")](const Tensor& g) {
    return Grads{neg(g * so.get() / sa.get())};
  });
}

Tensor pow(const Tensor& a_in, double p) {
  const Tensor a = amp::cast_fp32(a_in);
  detail::check_defined("pow", a);
  Tensor out = backend_for(a.device()).binary_scalar(BinaryOp::Pow, a, p, false);
  return record("pow", out, {a}, [sa = save(a, "pow"), p](const Tensor& g) {
    return Grads{g * pow(sa.get(), p - 1.0) * p};
  });
}

// ---------------------------------------------------------------- unary

namespace {
Tensor unary(const char* name, UnaryOp op, const Tensor& x) {
  detail::check_defined(name, x);
  return backend_for(x.device()).unary(op, x);
}
// Backward of the form g op' saved (one fused binary kernel).
Grads fused_grad(BinaryOp op, const Tensor& g, const Tensor& saved) {
  return Grads{backend_for(g.device()).binary(op, g, saved)};
}

// An activation whose backward reads its input x: the output op(x), which the next Linear saves,
// can be made again from x (Note [Recomputed activations] in autograd/recompute.h).
Tensor activation_saving_input(const char* name, UnaryOp op, BinaryOp backward, const Tensor& x) {
  Tensor y = unary(name, op, x);
  autograd::Saved sx = save(x, name);
  autograd::offer_recompute(name, y, {x}, [sx, op] {
    const Tensor& xs = sx.get();
    return backend_for(xs.device()).unary(op, xs);
  });
  return record(name, y, {x},
                [sx, backward](const Tensor& g) { return fused_grad(backward, g, sx.get()); });
}

// An activation whose backward reads its output y = op(x) (relu, sigmoid, tanh).
Tensor activation_saving_output(const char* name, UnaryOp op, BinaryOp backward, const Tensor& x) {
  Tensor y = unary(name, op, x);
  return record(name, y, {x}, [sy = save(y, name), backward](const Tensor& g) {
    return fused_grad(backward, g, sy.get());
  });
}
}  // namespace

Tensor neg(const Tensor& x) {
  return record("neg", unary("neg", UnaryOp::Neg, x), {x},
                [](const Tensor& g) { return Grads{neg(g)}; });
}

Tensor abs(const Tensor& x) {
  return record("abs", unary("abs", UnaryOp::Abs, x), {x},
                [sx = save(x, "abs")](const Tensor& g) { return Grads{g * sign(sx.get())}; });
}

Tensor sign(const Tensor& x) {
  return record("sign", unary("sign", UnaryOp::Sign, x), {x},
                [](const Tensor& g) { return Grads{zeros_like(g)}; });
}

Tensor square(const Tensor& x) {
  return record("square", unary("square", UnaryOp::Square, x), {x},
                [sx = save(x, "square")](const Tensor& g) { return Grads{g * sx.get() * 2.0}; });
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = amp::cast_fp32(x_in);
  Tensor out = unary("exp", UnaryOp::Exp, x);
  return record("exp", out, {x},
                [sy = save(out, "exp")](const Tensor& g) { return Grads{g * sy.get()}; });
}

Tensor log(const Tensor& x_in) {
  const Tensor x = amp::cast_fp32(x_in);
  return record("log", unary("log", UnaryOp::Log, x), {x},
                [sx = save(x, "log")](const Tensor& g) { return Grads{g / sx.get()}; });
}

Tensor sqrt(const Tensor& x) {
  Tensor out = unary("sqrt", UnaryOp::Sqrt, x);
  return record("sqrt", out, {x},
                [sy = save(out, "sqrt")](const Tensor& g) { return Grads{g / sy.get() * 0.5}; });
}

Tensor rsqrt(const Tensor& x) {
  Tensor out = unary("rsqrt", UnaryOp::Rsqrt, x);
  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
  return record("rsqrt", out, {x}, [sy = save(out, "rsqrt")](const Tensor& g) {
    const Tensor& y = sy.get();
    return Grads{g * y * y * y * -0.5};
  });
}

// The backward reads the output, not the input (y > 0 exactly where x > 0): the output is what
// the next layer saves anyway (a convolution's or Linear's input), so a relu(a + b) at the end of
// a residual block keeps one tensor alive for backward instead of two (ResNet-50: 0.6 GB less at
// batch 64, docs/perf.md).
Tensor relu(const Tensor& x) {
  return activation_saving_output("relu", UnaryOp::Relu, BinaryOp::ReluBackward, x);
}

Tensor gelu(const Tensor& x) {
  return activation_saving_input("gelu", UnaryOp::Gelu, BinaryOp::GeluBackward, x);
}

Tensor gelu_tanh(const Tensor& x) {
  return activation_saving_input("gelu_tanh", UnaryOp::GeluTanh, BinaryOp::GeluTanhBackward, x);
}

Tensor sigmoid(const Tensor& x) {
  return activation_saving_output("sigmoid", UnaryOp::Sigmoid, BinaryOp::SigmoidBackward, x);
}

Tensor tanh(const Tensor& x) {
  return activation_saving_output("tanh", UnaryOp::Tanh, BinaryOp::TanhBackward, x);
}

Tensor silu(const Tensor& x) {
  return activation_saving_input("silu", UnaryOp::Silu, BinaryOp::SiluBackward, x);
}

// Note [SwiGLU]
// Llama's MLP is down(silu(gate(x)) * up(x)). Composed, silu and mul are two kernels forward
// (silu(gate) is written, then read again) and three backward (mul's two gradients, then silu's).
// swiglu is one elementwise kernel forward (the binary op Swiglu, kernels/functors.h) and one
// backward (Backend::swiglu_backward: d gate and d up in one pass over g, gate and up). It saves
// gate and up, which its backward reads; its output, which the down projection saves for its
// weight gradient, is offered as a recipe (Note [Recomputed activations] in autograd/recompute.h):
// under --recompute-activations the Linear keeps the recipe instead, and the output is made again
// from gate and up, bit for bit by the same kernel, when the backward first needs it. As with
// GELU, what stays alive from the forward to the backward is gate and up, not their product.
Tensor swiglu(const Tensor& gate_in, const Tensor& up_in) {
  Tensor gate = gate_in, up = up_in;
  amp::promote(gate, up);  // two dtypes, as mul would
  Backend& be = check_pair("swiglu", gate, up);
  detail::check_floating("swiglu", gate);
  LOOM_CHECK(gate.shape() == up.shape(), "swiglu: gate ", describe(gate), " and up ", describe(up),
             " should have one shape");
  Tensor y = be.binary(BinaryOp::Swiglu, gate, up);
  autograd::Saved sg = save(gate, "swiglu"), su = save(up, "swiglu");
  autograd::offer_recompute("swiglu", y, {gate, up}, [sg, su] {
    const Tensor& a = sg.get();
    return backend_for(a.device()).binary(BinaryOp::Swiglu, a, su.get());
  });
  return record("swiglu", y, {gate, up}, [sg, su](const Tensor& g) {
    TensorPair d = backend_for(g.device()).swiglu_backward(g, sg.get(), su.get());
    return Grads{d.first, d.second};
  });
}

Tensor swiglu_composite(const Tensor& gate, const Tensor& up) { return silu(gate) * up; }

// ---------------------------------------------------------------- comparisons and where

Tensor eq(const Tensor& a, const Tensor& b) {
  return check_pair("eq", a, b).binary(BinaryOp::Eq, a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return check_pair("ne", a, b).binary(BinaryOp::Ne, a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return check_pair("lt", a, b).binary(BinaryOp::Lt, a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  return check_pair("le", a, b).binary(BinaryOp::Le, a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return check_pair("gt", a, b).binary(BinaryOp::Gt, a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return check_pair("ge", a, b).binary(BinaryOp::Ge, a, b);
}
Tensor eq(const Tensor& a, double s) {
  return backend_for(a.device()).binary_scalar(BinaryOp::Eq, a, s, false);
}
Tensor gt(const Tensor& a, double s) {
  return backend_for(a.device()).binary_scalar(BinaryOp::Gt, a, s, false);
}
Tensor lt(const Tensor& a, double s) {
  return backend_for(a.device()).binary_scalar(BinaryOp::Lt, a, s, false);
}

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  amp::promote(a, b);
  check_pair("where", a, b);
  detail::check_defined("where", cond, "condition");
  LOOM_CHECK(cond.dtype() == DType::Bool, "where: the condition must be bool, got ",
             describe(cond));
  LOOM_CHECK(cond.device() == a.device(), "where: the condition ", describe(cond),
             " is not on the device of the values ", describe(a));
  Tensor out = backend_for(a.device()).where(cond, a, b);
  return record("where", out, {a, b},
                [c = save(cond, "where"), sa = a.shape(), sb = b.shape()](const Tensor& g) {
                  Tensor z = zeros_like(g);
                  return Grads{sum_to(where(c.get(), g, z), sa), sum_to(where(c.get(), z, g), sb)};
                });
}

}  // namespace loom
