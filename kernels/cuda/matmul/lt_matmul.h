// One cuBLASLt matrix product, D = op(A) op(B) (+ bias, activation), in cuBLAS's column-major
// terms, with its plan (descriptors and the chosen algorithm) cached per shape, layout, dtype and
// math mode. cuda_linalg.cpp turns loom's row-major tensors into these arguments.
// FP8 products (LtFp8) are the same call with A and B in FP8 and their dequantising scales.
// Leaves out: tensors, shape checks and copies (the callers' job); beta other than 0 (D is
// overwritten) or 1 (LtMatmulArgs::accumulate: D += the product).
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "kernels/fp8.h"

namespace loom::cuda {

// The epilogues cuBLASLt fuses into the product. Its GELU is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), not loom's exact erf form. The *Aux forms
// also write the pre-activation (the product plus bias) to LtMatmulArgs::aux, for the backward.
// DGeluTanh, for the backward, multiplies the product by GELU's derivative at the pre-activation
// it reads from aux (m x n like D).
enum class LtEpilogue : uint8_t {
  None,
  Relu,
  GeluTanh,
  Bias,
  ReluBias,
  GeluTanhBias,
  GeluTanhAux,
  GeluTanhAuxBias,
  DGeluTanh
};

// One operand as cuBLAS sees it: the stored matrix is `rows` x `cols`, column-major, with leading
// dimension `ld`; with `transpose` the product uses its transpose.
struct LtOperand {
  const void* ptr = nullptr;
  bool transpose = false;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;  // elements between consecutive matrices (ignored when batch == 1)
};

// Note [FP8 products]
// With LtMatmulArgs::fp8 set, A and B hold FP8 codes (CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2, not both
// E5M2) and cuBLASLt computes D = a_scale * b_scale * op(A) op(B) (+ bias) in float32, where
// a_scale and b_scale are device pointers to one float each (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
// B_SCALE_POINTER: the inverse of the scales the codes were made with). `dtype` is then D's and the
// bias's type (bfloat16 or float32), never TF32. On Hopper the FP8 kernels take only the "TN"
// layout: A transposed, B not (both stored K-major), with k and the leading dimensions multiples
// of 16 and 16-byte aligned pointers; the caller arranges that
// (kernels/cuda/matmul/cuda_fp8_mm.cpp). fast_accum turns on CUBLASLT_MATMUL_DESC_FAST_ACCUM
// (Hopper's FP8 accumulation without the periodic promotion to full float32: faster, a little less
// precise).
struct LtFp8 {
  Fp8Format a = Fp8Format::E4M3, b = Fp8Format::E4M3;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool fast_accum = false;
};

struct LtMatmulArgs {
  int device = 0;
  DType dtype = DType::F32;      // of A, B and the bias
  std::optional<DType> d_dtype;  // of D: dtype, or float32 with 16-bit A and B
  int64_t m = 0, n = 0, k = 0;   // op(A): m x k, op(B): k x n, D: m x n
  int64_t batch = 1;
  LtOperand a, b;
  void* d = nullptr;  // column-major, leading dimension ldd
  int64_t ldd = 0, batch_stride_d = 0;
  LtEpilogue epilogue = LtEpilogue::None;
  const void* bias = nullptr;  // m values, one per row of D; only with the *Bias epilogues
  void* aux = nullptr;  // m x n like D, leading dimension ld_aux (a multiple of 8): written by
                        // the *Aux epilogues, read by DGeluTanh
  int64_t ld_aux = 0;
  bool accumulate = false;   // D += the product (beta 1, C = D) instead of D = the product
  std::optional<LtFp8> fp8;  // A and B in FP8 (Note [FP8 products])
};

// Launches the product on the current stream of args.device. Float32 follows allow_tf32()
// (Note [Strict fp32], math_mode.h); f16/bf16 accumulate in float32; f64 in float64. An error
// when cuBLASLt has no algorithm for the arguments.
void lt_matmul(const LtMatmulArgs& args);

// lt_matmul, or false (nothing launched) when cuBLASLt has no algorithm for these arguments (an
// epilogue it does not implement for this layout or dtype): the caller composes instead. The
// answer is cached with the plan.
bool lt_matmul_if_supported(const LtMatmulArgs& args);

// Plans cached so far (for tests of the cache).
size_t lt_plan_cache_size();

}  // namespace loom::cuda
