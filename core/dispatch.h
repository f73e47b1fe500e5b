// Dtype dispatch: the one macro-switch that turns a runtime DType into a C++ type `scalar_t`.
// Kernels use it; callers of kernels never branch on dtype.
// Leaves out: dispatch on device (that is the Backend's job, kernels/backend.h).
#pragma once

#include "core/dtype.h"
#include "core/error.h"

#define LOOM_DTYPE_CASE(D, ...)                         \
  case D: {                                             \
    using scalar_t = typename ::loom::CppType<D>::type; \
    return __VA_ARGS__();                               \
  }

// The cases of each dtype group, for the switches below.
#define LOOM_FLOATING_CASES(...)                   \
  LOOM_DTYPE_CASE(::loom::DType::F32, __VA_ARGS__) \
  LOOM_DTYPE_CASE(::loom::DType::F64, __VA_ARGS__) \
  LOOM_DTYPE_CASE(::loom::DType::F16, __VA_ARGS__) \
  LOOM_DTYPE_CASE(::loom::DType::BF16, __VA_ARGS__)
#define LOOM_INTEGER_CASES(...)                    \
  LOOM_DTYPE_CASE(::loom::DType::I64, __VA_ARGS__) \
  LOOM_DTYPE_CASE(::loom::DType::I32, __VA_ARGS__) \
  LOOM_DTYPE_CASE(::loom::DType::U8, __VA_ARGS__)

// Floating types only: f32, f64, f16, bf16.
#define LOOM_DISPATCH_FLOATING(dtype, op_name, ...)                                            \
  [&] {                                                                                        \
    switch (dtype) {                                                                           \
      LOOM_FLOATING_CASES(__VA_ARGS__)                                                         \
      default:                                                                                 \
        LOOM_FAIL(op_name, ": dtype ", ::loom::dtype_name(dtype),                              \
                  " is not supported (expected a floating type: float32, float64, float16 or " \
                  "bfloat16)");                                                                \
    }                                                                                          \
  }()

// Floating and integer types (arithmetic): everything but bool.
#define LOOM_DISPATCH_NUMERIC(dtype, op_name, ...)                                      \
  [&] {                                                                                 \
    switch (dtype) {                                                                    \
      LOOM_FLOATING_CASES(__VA_ARGS__)                                                  \
      LOOM_INTEGER_CASES(__VA_ARGS__)                                                   \
      default:                                                                          \
        LOOM_FAIL(op_name, ": dtype ", ::loom::dtype_name(dtype), " is not supported"); \
    }                                                                                   \
  }()

// Every dtype, bool included (copies, fills, comparisons).
#define LOOM_DISPATCH_ALL(dtype, op_name, ...)          \
  [&] {                                                 \
    switch (dtype) {                                    \
      LOOM_FLOATING_CASES(__VA_ARGS__)                  \
      LOOM_INTEGER_CASES(__VA_ARGS__)                   \
      LOOM_DTYPE_CASE(::loom::DType::Bool, __VA_ARGS__) \
    }                                                   \
    LOOM_FAIL(op_name, ": unknown dtype");              \
  }()
