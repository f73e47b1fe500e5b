// DType: the element types a Tensor can hold, their sizes and names, and the C++ type of each.
// Leaves out: type promotion (loom does not promote silently: mixed dtypes are an error, except
// where autocast casts on purpose).
#pragma once

#include <cstdint>
#include <string>

#include "core/half.h"

namespace loom {

enum class DType : uint8_t { F32, F64, F16, BF16, I64, I32, U8, Bool };

constexpr int kNumDTypes = 8;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "float16", "bfloat16", "int64", ...
bool is_floating(DType t);        // F32, F64, F16, BF16
DType dtype_from_name(const std::string& name);  // inverse of dtype_name; throws on unknown

// Map C++ types to DTypes and back.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::F16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::U8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::Bool;
};

template <DType D>
struct CppType;
template <>
struct CppType<DType::F32> {
  using type = float;
};
template <>
struct CppType<DType::F64> {
  using type = double;
};
template <>
struct CppType<DType::F16> {
  using type = Half;
};
template <>
struct CppType<DType::BF16> {
  using type = BFloat16;
};
template <>
struct CppType<DType::I64> {
  using type = int64_t;
};
template <>
struct CppType<DType::I32> {
  using type = int32_t;
};
template <>
struct CppType<DType::U8> {
  using type = uint8_t;
};
template <>
struct CppType<DType::Bool> {
  using type = bool;
};

}  // namespace loom
