// CPU FP8 (the FP8 section of kernels/backend_methods.inc): amax, the tensorwise quantisation
// through the reference fp8_encode, and the scaled product as a float32 GEMM of the decoded codes.
// The CPU has no FP8 arithmetic: this is the emulation that runs --amp fp8 on the CPU (slowly, for
// CI) and the oracle of the CUDA kernels, which are tested bit for bit (codes) or to float32
// rounding (products) against it. Leaves out: speed (a decode table, SIMD): the codes are small.
#include <algorithm>
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

Tensor scalar_f32(float v) {
  Tensor t = empty({}, {.dtype = DType::F32});
  t.data<float>()[0] = v;
  return t;
}

// t's codes decoded, (R, K) float32: the values x * scale was rounded to.
Tensor decode(const Fp8Operand& t) {
  Tensor out = empty(t.bits.shape(), {.dtype = DType::F32});
  const uint8_t* in = t.bits.data<uint8_t>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = fp8_decode(in[i], t.format);
  return out;
}

}  // namespace

// x (R, C) -> 0-d float32 max |x|
Tensor CpuBackend::fp8_amax(const Tensor& x) {
  check_fp8_input("fp8_amax", x);
  float m = 0.0f;
  LOOM_DISPATCH_FLOATING(x.dtype(), "fp8_amax", [&] {
    const scalar_t* p = x.data<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(float(p[i])));
  });
  return scalar_f32(m);
}

// x (R, C) -> bits (R, C) and/or bits_t (C, R): fp8_encode(float(x) * scale)
Fp8Tensor CpuBackend::fp8_quantize(const Tensor& x, Fp8Format format, Fp8Layouts layouts) {
  check_fp8_input("fp8_quantize", x);
  Fp8Tensor out;
  out.format = format;
  out.amax = fp8_amax(x);
  const float scale = fp8_scale(out.amax.data<float>()[0], float(fp8_max(format)));
  out.scale = scalar_f32(scale);
  out.inv_scale = scalar_f32(1.0f / scale);
  const int64_t R = x.size(0), C = x.size(1);
  Tensor codes = empty({R, C}, {.dtype = DType::U8});
  uint8_t* q = codes.data<uint8_t>();
  LOOM_DISPATCH_FLOATING(x.dtype(), "fp8_quantize", [&] {
    const scalar_t* p = x.data<scalar_t>();
    parallel_for(0, R * C, kGrainSize, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) q[i] = fp8_encode(float(p[i]) * scale, format);
    });
  });
  if (layouts.rows) out.bits = codes;
  if (layouts.transposed) {
    out.bits_t = empty({C, R}, {.dtype = DType::U8});
    uint8_t* t = out.bits_t.data<uint8_t>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) t[c * R + r] = q[r * C + c];
  }
  return out;
}

// a (M, K), b (N, K) -> (M, N) = inv_a inv_b (decode(a) @ decode(b)^T) + bias, in out_dtype
Tensor CpuBackend::fp8_mm(const Fp8Operand& a, const Fp8Operand& b, const Tensor& bias,
                          DType out_dtype, bool /*fast_accum*/) {
  check_fp8_mm_args(a, b, bias, out_dtype);
  Tensor acc = mm(decode(a), raw::transpose(decode(b), 0, 1));  // (M, N) float32
  const float s = a.inv_scale.data<float>()[0] * b.inv_scale.data<float>()[0];
  Tensor y = binary_scalar(BinaryOp::Mul, acc, double(s), false);
  if (bias.defined()) binary_(BinaryOp::Add, y, raw::cast(bias, DType::F32));
  return raw::cast(y, out_dtype);
}

}  // namespace loom::cpu
