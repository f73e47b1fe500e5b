// FP8 (the OCP 8-bit floating-point formats) for the tensorwise training recipe of docs/fp8.md:
// the two formats, their host reference encode and decode, the per-tensor scale, the payload a
// quantised tensor travels in (Fp8Tensor: uint8 bits and float32 scales on its device), and the
// GPU capability check. Leaves out: an FP8 dtype (core/dtype.h has none; FP8 payloads never leave
// the fp8 ops), the kernels (kernels/cpu/cpu_fp8.cpp, kernels/cuda/fp8/cuda_fp8.cu), other
// scaling recipes (rowwise, MX blocks, delayed scaling).
#pragma once

#include <cstdint>
#include <string>

#include "core/macros.h"
#include "core/tensor.h"

namespace loom {

// Note [FP8 formats]
// E4M3 ("e4m3fn" in OCP FP8 and PyTorch): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities, NaN is S.1111.111 (0x7f, 0xff), so the largest finite value is 1.75 * 2^8 = 448; the
// smallest normal 2^-6, the smallest subnormal 2^-9. E5M2: 1 sign, 5 exponent bits (bias 15), 2
// mantissa bits, IEEE-like: exponent 31 holds the infinities (mantissa 0) and NaNs; the largest
// finite value is 1.75 * 2^15 = 57344, the smallest normal 2^-14, the smallest subnormal 2^-16.
// Encoding rounds to nearest, ties to even, and saturates: anything beyond the largest finite
// value, infinities included, becomes that value with its sign (CUDA's __NV_SATFINITE); a NaN
// becomes 0x7f in both formats (what CUDA's conversion writes). E4M3 has the precision (forward:
// activations and weights), E5M2 the range (backward: gradients).
enum class Fp8Format : uint8_t { E4M3, E5M2 };

double fp8_max(Fp8Format f);        // 448 or 57344
const char* fp8_name(Fp8Format f);  // "e4m3" or "e5m2"
// The reference conversions (Note [FP8 formats]); the CUDA kernels are tested bit for bit
// against them.
uint8_t fp8_encode(float x, Fp8Format f);
float fp8_decode(uint8_t bits, Fp8Format f);

// The tensorwise scale of a tensor whose largest magnitude is amax: fmt_max / amax in float32, so
// that x * scale fills the format's range; 1 when amax is 0 (an all-zero tensor). amax is taken
// as at least 1e-12, as torchao does, so a tensor of tiny values gets a finite scale (and its
// zeros stay zeros instead of 0 * inf). Host and device run this same division.
LOOM_HOST_DEVICE inline float fp8_scale(float amax, float fmt_max) {
  if (amax == 0.0f) return 1.0f;
  return fmt_max / (amax > 1e-12f ? amax : 1e-12f);
}

// A tensor x (R, C) quantised with one scale: bits (R, C) uint8 holding encode(x * scale), bits_t
// (C, R) the same codes transposed (each only when asked for, undefined otherwise), scale and
// inv_scale = 1 / scale as 0-d float32 tensors on x's device (computed there: no host sync), and
// amax = max |x| (0-d float32). x is approximately decode(bits) * inv_scale.
struct Fp8Tensor {
  Tensor bits, bits_t;
  Tensor scale, inv_scale, amax;
  Fp8Format format = Fp8Format::E4M3;
};

// One factor of Backend::fp8_mm: bits (R, K) uint8 contiguous (K-major, what FP8 tensor cores
// read), the inv_scale that dequantises them, and their format.
struct Fp8Operand {
  Tensor bits, inv_scale;
  Fp8Format format = Fp8Format::E4M3;
};
// t's codes as they are (R, C), or transposed (C, R); an error when t was not quantised with
// that layout.
Fp8Operand fp8_rows(const Fp8Tensor& t);
Fp8Operand fp8_columns(const Fp8Tensor& t);

// Which layouts Backend::fp8_quantize writes.
struct Fp8Layouts {
  bool rows = true, transposed = false;
};

// The argument checks both backends run; errors name `op` and the tensors. fp8_amax and
// fp8_quantize take x (R, C) contiguous and floating; fp8_mm takes a (M, K) and b (N, K) uint8
// contiguous codes on one device with 0-d float32 inverse scales there, not both e5m2, bias
// undefined or (N) contiguous in out_dtype, out_dtype bfloat16 or float32.
void check_fp8_input(const char* op, const Tensor& x);
void check_fp8_mm_args(const Fp8Operand& a, const Fp8Operand& b, const Tensor& bias,
                       DType out_dtype);

// Whether a GPU of compute capability major.minor has FP8 tensor cores: 8.9 (Ada) and 9.0
// (Hopper) and later.
bool fp8_supported(int major, int minor);
// An error naming `device` ("cuda:0 (NVIDIA A100-SXM4-80GB)") and its capability when it has no
// FP8 tensor cores; `op` names the caller.
void check_fp8_capability(const char* op, const std::string& device, int major, int minor);

}  // namespace loom
