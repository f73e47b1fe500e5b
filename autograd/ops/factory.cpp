// Factories: allocate with core's empty(), fill with the device's backend.
#include "autograd/ops/factory.h"

#include <cmath>

#include "core/checked_math.h"
#include "kernels/backend.h"

namespace loom {

namespace {
Tensor finish(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}
Options no_grad(Options o) {
  o.requires_grad = false;
  return o;
}
}  // namespace

Tensor full(const Shape& s, double value, Options opt) {
  checked_nbytes("full", s, dtype_size(opt.dtype));
  Tensor t = empty(s, no_grad(opt));
  backend_for(opt.device).fill_(t, value);
  return finish(t, opt.requires_grad);
}

Tensor zeros(const Shape& s, Options opt) {
  checked_nbytes("zeros", s, dtype_size(opt.dtype));
  return full(s, 0.0, opt);
}
Tensor ones(const Shape& s, Options opt) {
  checked_nbytes("ones", s, dtype_size(opt.dtype));
  return full(s, 1.0, opt);
}

Tensor arange(double start, double end, double step, Options opt) {
  LOOM_CHECK(step != 0, "arange: step must be non-zero");
  LOOM_CHECK((end - start) / step >= 0, "arange: [", start, ", ", end, ") with step ", step,
             " is empty backwards");
  double count = std::ceil((end - start) / step);
  LOOM_CHECK(std::isfinite(count) && count < 9.2e18, "arange: [", start, ", ", end, ") with step ",
             step, " has more elements than int64 can count");
  int64_t n = int64_t(count);
  checked_nbytes("arange", {n}, dtype_size(opt.dtype));
  Tensor t = empty({n}, no_grad(opt));
  if (n > 0) backend_for(opt.device).arange_(t, start, step);
  return finish(t, opt.requires_grad);
}

Tensor uniform(const Shape& s, double lo, double hi, Options opt, Generator* gen) {
  LOOM_CHECK(is_floating(opt.dtype), "uniform: dtype ", dtype_name(opt.dtype), " is not floating");
  checked_nbytes("uniform", s, dtype_size(opt.dtype));
  Tensor t = empty(s, no_grad(opt));
  GeneratorState st = (gen ? *gen : default_generator()).reserve(uint64_t(t.numel()));
  if (t.numel() > 0)
    backend_for(opt.device).random_(t, RandomKind::Uniform, lo, hi, st.seed, st.offset);
  return finish(t, opt.requires_grad);
}

Tensor rand(const Shape& s, Options opt, Generator* gen) {
  checked_nbytes("rand", s, dtype_size(opt.dtype));
  return uniform(s, 0.0, 1.0, opt, gen);
}

Tensor randn(const Shape& s, Options opt, Generator* gen) {
  LOOM_CHECK(is_floating(opt.dtype), "randn: dtype ", dtype_name(opt.dtype), " is not floating");
  checked_nbytes("randn", s, dtype_size(opt.dtype));
  Tensor t = empty(s, no_grad(opt));
  GeneratorState st = (gen ? *gen : default_generator()).reserve(uint64_t(t.numel()));
  if (t.numel() > 0)
    backend_for(opt.device).random_(t, RandomKind::Normal, 0.0, 1.0, st.seed, st.offset);
  return finish(t, opt.requires_grad);
}

Tensor randint(int64_t low, int64_t high, const Shape& s, Options opt, Generator* gen) {
  LOOM_CHECK(low < high, "randint: low ", low, " must be below high ", high);
  LOOM_CHECK(opt.dtype != DType::Bool, "randint: dtype bool is not supported");
  checked_nbytes("randint", s, dtype_size(opt.dtype));
  Tensor t = empty(s, no_grad(opt));
  GeneratorState st = (gen ? *gen : default_generator()).reserve(uint64_t(t.numel()));
  if (t.numel() > 0)
    backend_for(opt.device)
        .random_(t, RandomKind::Int, double(low), double(high), st.seed, st.offset);
  return finish(t, opt.requires_grad);
}

Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor full_like(const Tensor& t, double v) {
  return full(t.shape(), v, {.dtype = t.dtype(), .device = t.device()});
}

Tensor scalar_tensor(double v, Options opt) { return full({}, v, opt); }

}  // namespace loom
