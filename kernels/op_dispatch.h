// Runtime op -> functor dispatch for the elementwise kernels of both backends (used by the shared
// front-end, kernels/elementwise_ops.h), and the dtype check they apply first. One switch per
// registry list of kernels/functors.h. Leaves out: the loops themselves (kernels/cpu/loops.h,
// kernels/cuda/loops.cuh).
#pragma once

#include "core/dispatch.h"
#include "kernels/functors.h"

namespace loom {

// Calls f(FunctorType{}) for a runtime UnaryOp / BinaryOp.
template <typename F>
auto with_unary_functor(UnaryOp op, const F& f) {
  switch (op) {
#define LOOM_CASE(n) \
  case UnaryOp::n:   \
    return f(n##Op{});
    LOOM_UNARY_OPS(LOOM_CASE)
#undef LOOM_CASE
  }
  LOOM_FAIL("unary: unknown op");
}

template <typename F>
auto with_binary_functor(BinaryOp op, const F& f) {
  switch (op) {
#define LOOM_CASE(n) \
  case BinaryOp::n:  \
    return f(n##Op{});
    LOOM_BINARY_OPS(LOOM_CASE)
#undef LOOM_CASE
  }
  LOOM_FAIL("binary: unknown op");
}

inline void check_numeric_op(const char* name, bool floating_only, DType t) {
  LOOM_CHECK(!floating_only || is_floating(t), name, ": dtype ", dtype_name(t),
             " is not supported (expected a floating type)");
  LOOM_CHECK(t != DType::Bool, name, ": bool tensors are not supported (convert with to())");
}

}  // namespace loom
