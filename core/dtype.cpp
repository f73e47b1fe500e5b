// DType names and sizes.
#include "core/dtype.h"

#include "core/error.h"

namespace loom {

// dtype_size is the C++ type's size; these are the sizes the tensors' bytes have always had.
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2 && sizeof(bool) == 1);

size_t dtype_size(DType t) {
#define LOOM_DTYPE_SIZE_CASE(D, T, name) \
  case DType::D:                         \
    return sizeof(T);
  switch (t) { LOOM_DTYPES(LOOM_DTYPE_SIZE_CASE) }
#undef LOOM_DTYPE_SIZE_CASE
  return 0;
}

const char* dtype_name(DType t) {
#define LOOM_DTYPE_NAME_CASE(D, T, name) \
  case DType::D:                         \
    return name;
  switch (t) { LOOM_DTYPES(LOOM_DTYPE_NAME_CASE) }
#undef LOOM_DTYPE_NAME_CASE
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
