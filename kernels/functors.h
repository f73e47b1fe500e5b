// Elementwise math, written once as host-device functors and shared by the CPU loops
// (kernels/cpu/loops.h) and the CUDA kernels (kernels/cuda/loops.cuh).
//
// Each functor works on the "accumulate type" of the element type (acc_t: float for f16/bf16,
// the type itself otherwise); the loops convert on load and store. The X-macro lists at the bottom
// are the single registry of elementwise ops: the enum, and both backends' switches, expand them.
// Adding an op: write its functor here, add it to a list, then its autograd op (see
// docs/adding-an-op.md).
// Leaves out: reductions (Backend::reduce; kernels/reduce_layout.h) and anything with state
// (dropout draws from Philox).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/macros.h"

namespace loom {

template <typename T>
struct AccType {
  using type = T;
};
template <>
struct AccType<Half> {
  using type = float;
};
template <>
struct AccType<BFloat16> {
  using type = float;
};
template <typename T>
using acc_t = typename AccType<T>::type;

// Overloads that pick the float or double version on host and device alike.
namespace math {
#if defined(__CUDA_ARCH__)
#define LOOM_MATH1(name, fname)                                      \
  LOOM_HOST_DEVICE inline float name(float x) { return ::fname(x); } \
  LOOM_HOST_DEVICE inline double name(double x) { return ::name(x); }
#else
#define LOOM_MATH1(name, fname)                       \
  inline float name(float x) { return std::name(x); } \
  inline double name(double x) { return std::name(x); }
#endif
LOOM_MATH1(exp, expf)
LOOM_MATH1(log, logf)
LOOM_MATH1(sqrt, sqrtf)
LOOM_MATH1(tanh, tanhf)
LOOM_MATH1(erf, erff)
LOOM_MATH1(fabs, fabsf)
#undef LOOM_MATH1
#if defined(__CUDA_ARCH__)
LOOM_HOST_DEVICE inline float pow(float a, float b) { return ::powf(a, b); }
LOOM_HOST_DEVICE inline double pow(double a, double b) { return ::pow(a, b); }
#else
inline float pow(float a, float b) { return std::pow(a, b); }
inline double pow(double a, double b) { return std::pow(a, b); }
#endif
// Integer pow by squaring (exponent >= 0); negative exponents truncate like C integer division.
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
LOOM_HOST_DEVICE inline T pow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? (b % 2 ? T(-1) : T(1)) : T(0));
  T r = 1;
  while (b) {
    if (b & 1) r *= a;
    a *= a;
    b >>= 1;
  }
  return r;
}
}  // namespace math

// ---------------------------------------------------------------- unary: y = f(x)
// floating_only: the op is defined on f32/f64/f16/bf16 only (a clear error for integers).

struct NegOp {
  static constexpr bool floating_only = false;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return -x;
  }
};
struct AbsOp {
  static constexpr bool floating_only = false;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return x;
    else
      return x < T(0) ? -x : x;
  }
};
struct SignOp {
  static constexpr bool floating_only = false;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>)
      return T(x > T(0));
    else
      return T((x > T(0)) - (x < T(0)));
  }
};
struct SquareOp {
  static constexpr bool floating_only = false;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return x * x;
  }
};
struct ReluOp {
  static constexpr bool floating_only = false;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : T(0);
  }
};
struct ExpOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return math::exp(x);
  }
};
struct LogOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return math::log(x);
  }
};
struct SqrtOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return math::sqrt(x);
  }
};
struct RsqrtOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return T(1) / math::sqrt(x);
  }
};
struct ReciprocalOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return T(1) / x;
  }
};
struct SigmoidOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return T(1) / (T(1) + math::exp(-x));
  }
};
struct TanhOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return math::tanh(x);
  }
};
// GELU, exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), PyTorch's default.
struct GeluOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + math::erf(x * T(0.70710678118654752440)));
  }
};
// GELU, tanh approximation (PyTorch's approximate="tanh", GPT-2's):
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
struct GeluTanhOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + math::tanh(inner));
  }
};
// SiLU (swish): x * sigmoid(x). The worked example of docs/adding-an-op.md.
struct SiluOp {
  static constexpr bool floating_only = true;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T x) const {
    return x / (T(1) + math::exp(-x));
  }
};

// ---------------------------------------------------------------- binary: z = f(a, b)
// returns_bool: the output dtype is bool (comparisons); otherwise it is the inputs' dtype.

#define LOOM_BINARY_FUNCTOR(Name, floating, expr)   \
  struct Name##Op {                                 \
    static constexpr bool floating_only = floating; \
    static constexpr bool returns_bool = false;     \
    template <typename T>                           \
    LOOM_HOST_DEVICE T operator()(T a, T b) const { \
      return expr;                                  \
    }                                               \
  };
#define LOOM_COMPARE_FUNCTOR(Name, expr)               \
  struct Name##Op {                                    \
    static constexpr bool floating_only = false;       \
    static constexpr bool returns_bool = true;         \
    template <typename T>                              \
    LOOM_HOST_DEVICE bool operator()(T a, T b) const { \
      return expr;                                     \
    }                                                  \
  };

LOOM_BINARY_FUNCTOR(Add, false, a + b)
LOOM_BINARY_FUNCTOR(Sub, false, a - b)
LOOM_BINARY_FUNCTOR(Mul, false, a* b)
LOOM_BINARY_FUNCTOR(Div, false, a / b)
LOOM_BINARY_FUNCTOR(Pow, false, math::pow(a, b))
LOOM_BINARY_FUNCTOR(Maximum, false, (a > b || a != a) ? a : b)  // NaN propagates
LOOM_BINARY_FUNCTOR(Minimum, false, (a < b || a != a) ? a : b)
// Backward helpers: a = incoming gradient, b = the saved input x or output y.
LOOM_BINARY_FUNCTOR(ReluBackward, false, b > T(0) ? a : T(0))  // b = x or relu(x)
LOOM_BINARY_FUNCTOR(SigmoidBackward, true, a* b*(T(1) - b))    // b = y
LOOM_BINARY_FUNCTOR(TanhBackward, true, a*(T(1) - b * b))      // b = y
// d/dx [x Phi(x)] = Phi(x) + x phi(x)
LOOM_BINARY_FUNCTOR(GeluBackward, true,
                    a*(T(0.5) * (T(1) + math::erf(b * T(0.70710678118654752440))) +
                       b * T(0.39894228040143267794) * math::exp(T(-0.5) * b * b)))  // b = x
// d/dx [x s(x)] = s(x) (1 + x (1 - s(x))), s = sigmoid
LOOM_BINARY_FUNCTOR(SiluBackward, true,
                    a*(T(1) / (T(1) + math::exp(-b))) *
                        (T(1) + b * (T(1) - T(1) / (T(1) + math::exp(-b)))))  // b = x
// SwiGLU, Llama's MLP activation: silu(gate) * up, a = gate, b = up (autograd/ops/elementwise.cpp).
LOOM_BINARY_FUNCTOR(Swiglu, true, a / (T(1) + math::exp(-a)) * b)
// d/dx GELU-tanh = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2),
// t = tanh(sqrt(2 / pi) (x + 0.044715 x^3)); a = incoming gradient, b = x.
struct GeluTanhBackwardOp {
  static constexpr bool floating_only = true;
  static constexpr bool returns_bool = false;
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T a, T b) const {
    const T k = T(0.79788456080286535588), x2 = b * b;
    const T t = math::tanh(k * (b + T(0.044715) * x2 * b));
    const T dinner = k * (T(1) + T(3 * 0.044715) * x2);
    return a * (T(0.5) * (T(1) + t) + T(0.5) * b * (T(1) - t * t) * dinner);
  }
};
// SwiGLU's two gradients from the incoming one, g: with s = sigmoid(gate),
//   d gate = g up s (1 + gate (1 - s)),   d up = g gate s.
// Not in the registry (two outputs): Backend::swiglu_backward runs it on both backends.
struct SwigluBackward {
  template <typename T>
  LOOM_HOST_DEVICE void operator()(T g, T gate, T up, T& d_gate, T& d_up) const {
    const T s = T(1) / (T(1) + math::exp(-gate));
    d_up = g * gate * s;
    d_gate = g * up * s * (T(1) + gate * (T(1) - s));
  }
};
LOOM_COMPARE_FUNCTOR(Eq, a == b)
LOOM_COMPARE_FUNCTOR(Ne, a != b)
LOOM_COMPARE_FUNCTOR(Lt, a < b)
LOOM_COMPARE_FUNCTOR(Le, a <= b)
LOOM_COMPARE_FUNCTOR(Gt, a > b)
LOOM_COMPARE_FUNCTOR(Ge, a >= b)
#undef LOOM_BINARY_FUNCTOR
#undef LOOM_COMPARE_FUNCTOR

// ---------------------------------------------------------------- the registries
// clang-format off
#define LOOM_UNARY_OPS(X) \
  X(Neg) X(Abs) X(Sign) X(Square) X(Relu) X(Exp) X(Log) X(Sqrt) X(Rsqrt) X(Reciprocal) \
  X(Sigmoid) X(Tanh) X(Gelu) X(GeluTanh) X(Silu)

#define LOOM_BINARY_OPS(X) \
  X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(ReluBackward) \
  X(SigmoidBackward) X(TanhBackward) X(GeluBackward) X(GeluTanhBackward) X(SiluBackward) \
  X(Swiglu) \
  X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge)
// clang-format on

#define LOOM_ENUM_ENTRY(name) name,
enum class UnaryOp { LOOM_UNARY_OPS(LOOM_ENUM_ENTRY) };
enum class BinaryOp { LOOM_BINARY_OPS(LOOM_ENUM_ENTRY) };
#undef LOOM_ENUM_ENTRY

const char* op_name(UnaryOp op);   // "exp"
const char* op_name(BinaryOp op);  // "add"
bool returns_bool(BinaryOp op);

}  // namespace loom
