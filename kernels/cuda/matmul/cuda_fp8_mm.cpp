// CUDA's Backend::fp8_mm: the scaled FP8 product through cuBLASLt (lt_matmul.h, Note [FP8
// products]), after the capability check (FP8 tensor cores: compute capability 8.9 and up).
// Leaves out: the quantisation (kernels/cuda/fp8/cuda_fp8.cu) and layouts other than the one FP8
// kernels take: both factors K-major, which the callers make (autograd/ops/fp8_linear.cpp).
#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/matmul/lt_matmul.h"

namespace loom::cuda {

namespace {

// Note [FP8 layout]
// cuBLASLt's FP8 kernels on Hopper compute D = op(A) op(B) with op(A) = A^T and op(B) = B, A and
// B stored column-major K x m and K x n: both K-major. A row-major (M, K) matrix is, in the same
// memory, the column-major K x M one, so loom's y (M, N) = a (M, K) @ b (N, K)^T, which is the
// column-major N x M matrix y^T = b a^T, is D with A = b (m = N), B = a (n = M), ldd = N: both
// factors as they are, no copies. The three products of a Linear are written in this form by
// handing in transposed codes where needed (the quantisation writes them in the same pass):
//   y  (M, N) = x  (M, K) @ W   (N, K)^T
//   dx (M, K) = g  (M, N) @ W^T (K, N)^T
//   dW (N, K) = g^T (N, M) @ x^T (K, M)^T
// M, N and K must be multiples of 16 (leading dimensions 16 bytes apart, cuBLASLt's requirement).

// Each device's capability, read once: {"cuda:0 (name)", major, minor}.
struct Capability {
  std::string device;
  int major = 0, minor = 0;
};

const Capability& capability_of(int dev) {
  static std::mutex mu;
  static std::vector<Capability> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (size_t(dev) >= cache.size()) cache.resize(size_t(dev) + 1);
  Capability& c = cache[size_t(dev)];
  if (c.device.empty()) {
    cudaDeviceProp prop{};
    LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    c = {str("cuda:", dev, " (", prop.name, ")"), prop.major, prop.minor};
  }
  return c;
}

LtOperand k_major(const Tensor& bits, bool transpose) {
  LtOperand op;
  op.ptr = bits.data_ptr();
  op.transpose = transpose;
  op.rows = bits.size(1);  // K
  op.cols = bits.size(0);
  op.ld = bits.size(1);
  return op;
}

}  // namespace

// a (M, K), b (N, K) -> (M, N) = inv_a inv_b (decode(a) @ decode(b)^T) + bias, in out_dtype
Tensor CudaBackend::fp8_mm(const Fp8Operand& a, const Fp8Operand& b, const Tensor& bias,
                           DType out_dtype, bool fast_accum) {
  check_fp8_mm_args(a, b, bias, out_dtype);
  const int dev = a.bits.device().index;
  const Capability& cap = capability_of(dev);
  check_fp8_capability("fp8_mm", cap.device, cap.major, cap.minor);
  const int64_t M = a.bits.size(0), N = b.bits.size(0), K = a.bits.size(1);
  LOOM_CHECK(M % 16 == 0 && N % 16 == 0 && K % 16 == 0 && K > 0, "fp8_mm: a ", a.bits.shape(),
             " and b ", b.bits.shape(), ": FP8 products on CUDA need M, N and K multiples of 16",
             " (Note [FP8 layout] in kernels/cuda/matmul/cuda_fp8_mm.cpp)");
  Tensor out = empty({M, N}, {.dtype = out_dtype, .device = a.bits.device()});
  if (out.numel() == 0) return out;
  LtMatmulArgs args;
  args.device = dev;
  args.dtype = out_dtype;
  args.m = N;
  args.n = M;
  args.k = K;
  args.a = k_major(b.bits, true);
  args.b = k_major(a.bits, false);
  args.d = out.data_ptr();
  args.ldd = N;
  // cuBLASLt's FP8 kernels take a bias in bfloat16 (or float16) only; its default bias type is
  // D's, and with a float32 D the epilogue wrote garbage (seen on an H200). A float32 output gets
  // its float32 bias added after the product instead: exact, one pass over (M, N).
  const bool bias_in_epilogue = bias.defined() && out_dtype != DType::F32;
  args.epilogue = bias_in_epilogue ? LtEpilogue::Bias : LtEpilogue::None;
  args.bias = bias_in_epilogue ? bias.data_ptr() : nullptr;
  args.fp8 = LtFp8{.a = b.format,
                   .b = a.format,
                   .a_scale = b.inv_scale.data<float>(),
                   .b_scale = a.inv_scale.data<float>(),
                   .fast_accum = fast_accum};
  DeviceGuard guard(dev);
  lt_matmul(args);
  if (bias.defined() && !bias_in_epilogue) binary_(BinaryOp::Add, out, bias);  // (N) over rows
  return out;
}

}  // namespace loom::cuda
