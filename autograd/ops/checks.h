// Argument checks shared by the ops: every message names the op and the offending tensors.
// Leaves out: op-specific checks (shapes of conv weights, ...), which live with their op.
#pragma once

#include "core/tensor.h"
#include "kernels/backend.h"

namespace loom::detail {

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  LOOM_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

// Same device and dtype; returns their backend.
inline Backend& check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  LOOM_CHECK(a.device() == b.device(), op, ": expected both tensors on one device, got ",
             describe(a), " and ", describe(b));
  LOOM_CHECK(a.dtype() == b.dtype(), op, ": expected one dtype, got ", describe(a), " and ",
             describe(b), " (convert one with to(dtype))");
  return backend_for(a.device());
}

inline void check_floating(const char* op, const Tensor& t) {
  LOOM_CHECK(t.is_floating_point(), op, ": expected a floating tensor, got ", describe(t));
}

inline void check_dim(const char* op, const Tensor& t, int64_t ndim, const char* what = "input") {
  LOOM_CHECK(t.dim() == ndim, op, ": expected ", what, " with ", ndim, " dims, got ", describe(t));
}

}  // namespace loom::detail
