// Factories: new tensors filled with constants, ranges or random numbers (Philox, reproducible
// across devices for a given seed; see core/generator.h).
// Leaves out: empty() and from_vector(), which are in core/tensor.h.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace loom {

Tensor zeros(const Shape& s, Options opt = {});
Tensor ones(const Shape& s, Options opt = {});
Tensor full(const Shape& s, double value, Options opt = {});
// [start, end) with `step`; dtype defaults to int64 if not given float options.
Tensor arange(double start, double end, double step = 1.0, Options opt = {.dtype = DType::I64});
inline Tensor arange(double end, Options opt = {.dtype = DType::I64}) {
  return arange(0, end, 1, opt);
}
Tensor rand(const Shape& s, Options opt = {}, Generator* gen = nullptr);   // uniform [0, 1)
Tensor randn(const Shape& s, Options opt = {}, Generator* gen = nullptr);  // standard normal
Tensor randint(int64_t low, int64_t high, const Shape& s, Options opt = {.dtype = DType::I64},
               Generator* gen = nullptr);
Tensor uniform(const Shape& s, double lo, double hi, Options opt = {}, Generator* gen = nullptr);

Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// A 0-d tensor holding one value.
Tensor scalar_tensor(double v, Options opt = {});

}  // namespace loom
