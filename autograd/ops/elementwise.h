// Differentiable elementwise ops (broadcasting), their operators, and comparisons.
// Leaves out: in-place versions (autograd/ops/inplace.cpp; never recorded).
#pragma once

#include "core/tensor.h"

namespace loom {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // gradient to the larger (a on ties)
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rdiv(const Tensor& a, double s);  // s / a
Tensor pow(const Tensor& a, double p);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact (erf) form
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): PyTorch's gelu(x, approximate="tanh"),
// GPT-2's.
Tensor gelu_tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor silu(const Tensor& x);  // x * sigmoid(x)
// SwiGLU, Llama's MLP activation: silu(gate) * up for gate and up of one shape, as one op with a
// fused forward and backward (Note [SwiGLU] in autograd/ops/elementwise.cpp). Under
// --recompute-activations its output is rebuilt from gate and up in the backward.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// The same as silu(gate) * up, its gradient from the pieces: the fused op's oracle.
Tensor swiglu_composite(const Tensor& gate, const Tensor& up);
Tensor sign(const Tensor& x);  // gradient 0

// Comparisons: bool results, never differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
// cond (bool) ? a : b, broadcast together; differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace loom
