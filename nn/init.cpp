// Initialisers: draw a fresh tensor with loom::uniform / loom::randn in t's dtype and device and
// copy it into t under NoGradGuard (so parameters that require grad can be filled).
// Leaves out: fan computations for tensors with fewer than 2 dims (an error, as in PyTorch).
#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"

namespace loom::nn::init {

namespace {
Tensor fill_from(const Tensor& t, const Tensor& values) {
  NoGradGuard g;
  Tensor h = t;
  h.copy_(values);
  return t;
}

void check_float(const char* op, const Tensor& t) {
  LOOM_CHECK(t.defined() && t.is_floating_point(), "init::", op,
             ": expected a floating tensor, got ",
             t.defined() ? describe(t) : std::string("an undefined tensor"));
}

double fan_of(const char* op, const Tensor& t, FanMode mode) {
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  int64_t fan = mode == FanMode::FanIn ? in : out;
  LOOM_CHECK(fan > 0, "init::", op, ": ", describe(t), " has a zero fan");
  return double(fan);
}
}  // namespace

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv2d:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
  }
  LOOM_FAIL("calculate_gain: unknown nonlinearity");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  LOOM_CHECK(t.defined() && t.dim() >= 2,
             "calculate_fan_in_and_fan_out: needs a tensor with at least 2 dims, got ",
             t.defined() ? describe(t) : std::string("an undefined tensor"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(const Tensor& t, double a, double b, Generator* gen) {
  check_float("uniform_", t);
  LOOM_CHECK(a <= b, "init::uniform_: lower bound ", a, " is above the upper bound ", b);
  if (skipping_init()) return t;  // Note [Where a module makes its parameters]
  return fill_from(t, uniform(t.shape(), a, b, {.dtype = t.dtype(), .device = t.device()}, gen));
}

Tensor normal_(const Tensor& t, double mean, double std, Generator* gen) {
  check_float("normal_", t);
  LOOM_CHECK(std >= 0, "init::normal_: std ", std, " is negative");
  if (skipping_init()) return t;
  NoGradGuard g;
  Tensor z = randn(t.shape(), {.dtype = t.dtype(), .device = t.device()}, gen);
  return fill_from(t, z * std + mean);
}

Tensor constant_(const Tensor& t, double value) {
  LOOM_CHECK(t.defined(), "init::constant_: the tensor is undefined");
  NoGradGuard g;
  Tensor h = t;
  h.fill_(value);
  return t;
}

Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator* gen) {
  check_float("kaiming_uniform_", t);
  double bound = calculate_gain(nl, a) * std::sqrt(3.0 / fan_of("kaiming_uniform_", t, mode));
  return uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator* gen) {
  check_float("kaiming_normal_", t);
  double std = calculate_gain(nl, a) / std::sqrt(fan_of("kaiming_normal_", t, mode));
  return normal_(t, 0.0, std, gen);
}

Tensor xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  check_float("xavier_uniform_", t);
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  double a = gain * std::sqrt(6.0 / double(in + out));
  return uniform_(t, -a, a, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  check_float("xavier_normal_", t);
  auto [in, out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(in + out)), gen);
}

// ---------------------------------------------------------------- where parameters are made

ParameterScope::State& ParameterScope::current() {
  thread_local State state;
  return state;
}

ParameterScope::ParameterScope(Device device, DType dtype, bool skip_init) : outer_(current()) {
  current() = State{true, device, dtype, skip_init};
}

ParameterScope::~ParameterScope() { current() = outer_; }

Tensor new_parameter(const Shape& shape) {
  const ParameterScope::State& s = ParameterScope::current();
  return s.active ? empty(shape, {.dtype = s.dtype, .device = s.device}) : empty(shape);
}

bool skipping_init() { return ParameterScope::current().skip_init; }

}  // namespace loom::nn::init
