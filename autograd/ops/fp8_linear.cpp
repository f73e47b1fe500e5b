// fp8_linear (autograd/ops/fp8_linear.h): the FP8 Linear's forward and backward side by side, on
// Backend::fp8_quantize and Backend::fp8_mm. Leaves out: the kernels (kernels/cpu/cpu_fp8.cpp,
// kernels/cuda/fp8/cuda_fp8.cu, kernels/cuda/matmul/cuda_fp8_mm.cpp) and the choice of which
// Linears run it (nn/fp8.h).
#include "autograd/ops/fp8_linear.h"

#include <optional>

#include "autograd/amp/autocast.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/shape.h"
#include "kernels/raw_ops.h"

namespace loom {

// Note [FP8 linear]
// torchao's "tensorwise" float8 training recipe. Each tensor that enters a product is quantised
// with one scale computed from its own current amax (dynamic scaling): scale = fmt_max / amax,
// codes = saturate(round(t * scale)) (Note [FP8 formats] in kernels/fp8.h), and the product of
// two quantised tensors is inv_scale_a * inv_scale_b * (codes_a @ codes_b), accumulated in float32.
//   forward   y  = x W^T + b        x, W in e4m3 (precision); bias in the GEMM's epilogue; the
//                                   accumulation in Hopper's fast FP8 mode, as torchao's forward
//   backward  dx = g W              g in e5m2 (range), W in e4m3
//             dW = g^T x            g in e5m2, x in e4m3 (the forward's codes, kept: one byte an
//                                   element instead of the bfloat16 input)
//             db = sum of g's rows  in bfloat16/float32, not quantised
// The FP8 kernels read both factors K-major (Note [FP8 layout] in
// kernels/cuda/matmul/cuda_fp8_mm.cpp), so x, W and g are each quantised once into the layouts
// their products need: W as (N, K) and W^T (K, N), x as (M, K) and x^T (K, M), g as (M, N) and
// g^T (N, M), the transposes written by the same pass that writes the rows (and only when the
// gradient that needs them is wanted). The float32 master weight is quantised directly (no
// bfloat16 copy), and dW is written in the weight's dtype by the GEMM (float32: Note [Float32
// weight gradients] in autograd/ops/linalg.cpp). No scale is read back to the host: amax, scale
// and inverse scale stay on the device from the reduction to the GEMM. On the CPU the same steps
// run emulated (codes from the reference encoder, the product of the decoded codes in float32),
// which is what tests/autograd/ops/test_fp8_linear.cpp checks against float64.

bool fp8_linear_applies(int64_t M, int64_t K, int64_t N) {
  return M > 0 && M % 16 == 0 && K > 0 && K % 16 == 0 && N > 0 && N % 16 == 0;
}

namespace {

constexpr const char* kOp = "fp8_linear";

// The checks of fp8_linear's arguments; returns the output dtype.
DType check_fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_defined(kOp, x);
  detail::check_defined(kOp, weight, "weight");
  detail::check_dim(kOp, weight, 2, "weight");
  LOOM_CHECK(x.device() == weight.device(), kOp, ": input ", describe(x), " and weight ",
             describe(weight), " must be on one device");
  LOOM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::BF16, kOp, ": input ", describe(x),
             " must be float32 or bfloat16");
  LOOM_CHECK(weight.dtype() == DType::F32 || weight.dtype() == DType::BF16, kOp, ": weight ",
             describe(weight), " must be float32 or bfloat16");
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), kOp, ": input ", x.shape(), " has ",
             x.dim() ? x.size(-1) : 0, " features, weight ", weight.shape(), " expects ",
             weight.size(1));
  if (bias.defined()) {
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.device() == x.device() &&
                   bias.is_floating_point(),
               kOp, ": bias ", describe(bias), " does not match weight ", describe(weight),
               " (expected (", weight.size(0), ") floating on ", x.device(), ")");
  }
  const DType out = amp::autocast_dtype().value_or(x.dtype());
  LOOM_CHECK(out == DType::BF16 || out == DType::F32, kOp, ": the output dtype would be ",
             dtype_name(out), "; FP8 products write bfloat16 or float32 (use bfloat16 autocast)");
  return out;
}

// What the backward keeps: the forward's codes in the layouts its products read, and the dtypes
// of the gradients.
struct Fp8Saved {
  Fp8Tensor x, w;  // x^T (K, M) codes for dW, W^T (K, N) codes for dx
  DType x_dtype, w_dtype;
  std::optional<DType> b_dtype;
};

// g (M, N) -> {dx (M, K), dW (N, K), db (N) when there is a bias}, each only when needed.
Grads fp8_linear_backward(const Fp8Saved& s, const Tensor& g_in) {
  Backend& be = backend_for(g_in.device());
  const Tensor g = raw::contiguous(g_in);
  const bool need_x = needs_input_grad(0), need_w = needs_input_grad(1);
  Fp8Tensor qg =
      be.fp8_quantize(g, Fp8Format::E5M2, {.rows = need_x, .transposed = need_w});  // g, g^T
  Grads grads{
      need_x ? be.fp8_mm(fp8_rows(qg), fp8_columns(s.w), Tensor(), s.x_dtype, false) : Tensor(),
      need_w ? be.fp8_mm(fp8_columns(qg), fp8_columns(s.x), Tensor(), s.w_dtype, false) : Tensor()};
  if (s.b_dtype)
    grads.push_back(needs_input_grad(2)
                        ? raw::cast(be.reduce(ReduceOp::Sum, g, {0}, false), *s.b_dtype)
                        : Tensor());
  return grads;
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType out_dtype = check_fp8_linear(x, weight, bias);
  const int64_t K = weight.size(1), N = weight.size(0), M = K > 0 ? x.numel() / K : 0;
  if (!fp8_linear_applies(M, K, N)) return linear(x, weight, bias);
  Backend& be = backend_for(x.device());
  const Tensor x2 = x.dim() == 2 ? x : reshape(x, {-1, K});  // (M, K)
  const bool grad = autograd::is_grad_enabled();
  const bool need_x = grad && x2.requires_grad(), need_w = grad && weight.requires_grad();
  Fp8Saved s{be.fp8_quantize(raw::contiguous(x2), Fp8Format::E4M3, {true, need_w}),
             be.fp8_quantize(raw::contiguous(weight), Fp8Format::E4M3, {true, need_x}), x2.dtype(),
             weight.dtype(), bias.defined() ? std::optional<DType>(bias.dtype()) : std::nullopt};
  const Tensor b = bias.defined() ? raw::cast(raw::contiguous(bias), out_dtype) : Tensor();
  Tensor y = be.fp8_mm(fp8_rows(s.x), fp8_rows(s.w), b, out_dtype, /*fast_accum=*/true);
  s.x.bits = Tensor();  // the backward reads only the transposes
  s.w.bits = Tensor();
  std::vector<Tensor> inputs{x2, weight};
  if (bias.defined()) inputs.push_back(bias);
  y = record(kOp, y, inputs,
             [s = std::move(s)](const Tensor& g) { return fp8_linear_backward(s, g); });
  if (x.dim() == 2) return y;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  return reshape(y, out_shape);
}

}  // namespace loom
