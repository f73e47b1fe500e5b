// The CUDA libraries' names of loom's floating dtypes: cuBLASLt's cudaDataType_t and cuDNN's
// cudnnDataType_t, from one switch (the matmuls and the convolutions take the same four dtypes).
// Leaves out: NCCL's types (distributed/process_group/nccl_process_group.cpp maps every dtype).
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include "core/dtype.h"
#include "core/error.h"

namespace loom::cuda {

struct LibraryTypes {
  cudaDataType_t cuda{};    // cuBLAS(Lt)
  cudnnDataType_t cudnn{};  // cuDNN
};

// t's types; an error naming `op` ("matmul on CUDA") when t is not a floating dtype.
inline LibraryTypes library_types(DType t, const char* op) {
  switch (t) {
    case DType::F32:
      return {CUDA_R_32F, CUDNN_DATA_FLOAT};
    case DType::F64:
      return {CUDA_R_64F, CUDNN_DATA_DOUBLE};
    case DType::F16:
      return {CUDA_R_16F, CUDNN_DATA_HALF};
    case DType::BF16:
      return {CUDA_R_16BF, CUDNN_DATA_BFLOAT16};
    default:
      LOOM_FAIL(op, ": dtype ", dtype_name(t),
                " is not supported (expected float32, float64, float16 or bfloat16)");
  }
}

}  // namespace loom::cuda
