// DType: the element types a Tensor can hold, their sizes and names, and the C++ type of each.
// Leaves out: type promotion (loom does not promote silently: mixed dtypes are an error, except
// where autocast casts on purpose).
#pragma once

#include <cstdint>
#include <string>

#include "core/half.h"

namespace loom {

enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, U8, Bool };

// The one table of the dtypes: X(enumerator, C++ type, name), a row per DType.
// DTypeOf, CppType, dtype_size (the C++ type's size) and dtype_name are written from it.
// clang-format off
#define LOOM_DTYPES(X)          \
  X(F32, float, "float32")      \
  X(F64, double, "float64")     \
  X(F16, Half, "float16")       \
  X(BF16, BFloat16, "bfloat16") \
  X(I64, int64_t, "int64")      \
  X(I32, int32_t, "int32")      \
  X(U8, uint8_t, "uint8")       \
  X(Bool, bool, "bool")
// clang-format on

#define LOOM_DTYPE_COUNT(D, T, name) +1
constexpr int kNumDTypes = 0 LOOM_DTYPES(LOOM_DTYPE_COUNT);
#undef LOOM_DTYPE_COUNT

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "float16", "bfloat16", "int64", ...
bool is_floating(DType t);        // F32, F64, F16, BF16
DType dtype_from_name(const std::string& name);  // inverse of dtype_name; throws on unknown

// Map C++ types to DTypes and back: one specialization of each per row of LOOM_DTYPES.
template <typename T>
struct DTypeOf;
template <DType D>
struct CppType;

#define LOOM_DTYPE_TRAITS(D, T, name)        \
  template <>                                \
  struct DTypeOf<T> {                        \
    static constexpr DType value = DType::D; \
  };                                         \
  template <>                                \
  struct CppType<DType::D> {                 \
    using type = T;                          \
  };
LOOM_DTYPES(LOOM_DTYPE_TRAITS)
#undef LOOM_DTYPE_TRAITS

}  // namespace loom
