// DType names and sizes.
#include "core/dtype.h"

#include "core/error.h"

namespace loom {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I64:
      return 8;
    case DType::I32:
      return 4;
    case DType::U8:
      return 1;
    case DType::Bool:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    case DType::I64:
      return "int64";
    case DType::I32:
      return "int32";
    case DType::U8:
      return "uint8";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

DType dtype_from_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    if (name == dtype_name(t)) return t;
  }
  LOOM_FAIL("dtype_from_name: unknown dtype '", name,
            "' (expected float32, float64, float16, bfloat16, int64, int32, uint8 or bool)");
}

}  // namespace loom
