// CUDA matrix products: mm, bmm and the fused linear layer, all through cuBLASLt (lt_matmul.h).
// Row-major loom tensors are handed to column-major cuBLAS without copies (Note [Row-major GEMM]);
// layouts that are neither row- nor column-contiguous are copied with raw::contiguous first.
// Leaves out: the plan cache and the library calls (lt_matmul.cpp).
#include <algorithm>
#include <optional>

#include "core/tensor_views.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/matmul/cuda_linear.h"
#include "kernels/cuda/matmul/lt_matmul.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Row-major GEMM]
// cuBLAS is column-major. A row-major (M, N) output C is, in the same memory, the column-major
// N x M matrix C^T = B^T A^T. So we ask cuBLASLt for D = op(A') op(B') with A' = b, B' = a,
// m = N, n = M, k = K. A row-major factor X (R, C) with unit column stride is, as stored, the
// column-major C x R matrix X^T (op N gives what we need); a transposed view (unit row stride) is
// stored as the column-major R x C matrix X itself, so it goes in with op T. Either way no copy.

// `t` (R, C) with strides (s0, s1) at batch stride sb, as a cuBLAS operand, or nothing when its
// layout is neither row- nor column-contiguous (or is broadcast along rows or the batch).
std::optional<LtOperand> as_operand(const Tensor& t, int64_t R, int64_t C, int64_t s0, int64_t s1,
                                    int64_t sb, int64_t batch) {
  if (batch > 1 && sb <= 0) return std::nullopt;
  LtOperand op;
  op.ptr = t.data_ptr();
  op.batch_stride = batch > 1 ? sb : 0;
  if ((C == 1 || s1 == 1) && (R == 1 || s0 >= std::max<int64_t>(C, 1))) {
    op.transpose = false;  // stored as X^T: C x R, column-major
    op.rows = C;
    op.cols = R;
    op.ld = R == 1 ? std::max<int64_t>(C, 1) : s0;
    return op;
  }
  if ((R == 1 || s0 == 1) && (C == 1 || s1 >= std::max<int64_t>(R, 1))) {
    op.transpose = true;  // stored as X: R x C, column-major
    op.rows = R;
    op.cols = C;
    op.ld = C == 1 ? std::max<int64_t>(R, 1) : s1;
    return op;
  }
  return std::nullopt;
}

// The operand of a 3-d (B, R, C) tensor, copying it to contiguous when its layout needs that.
// `keep` holds the copy alive until the launch.
LtOperand operand_of(const Tensor& t, Tensor& keep) {
  int64_t B = t.size(0), R = t.size(1), C = t.size(2);
  if (auto op = as_operand(t, R, C, t.stride(1), t.stride(2), t.stride(0), B)) return *op;
  keep = raw::contiguous(t);
  return *as_operand(keep, R, C, keep.stride(1), keep.stride(2), keep.stride(0), B);
}

// The cuBLASLt arguments of out (B, M, N) contiguous = a (B, M, K) @ b (B, K, N), K > 0, with no
// epilogue (Note [Row-major GEMM]). keep_a and keep_b hold the copies made of layouts cuBLAS
// cannot read, until the launch.
LtMatmulArgs gemm_args(const Tensor& out, const Tensor& a, const Tensor& b, Tensor& keep_a,
                       Tensor& keep_b) {
  const int64_t B = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  LtMatmulArgs args;
  args.device = out.device().index;
  args.dtype = a.dtype();
  args.d_dtype = out.dtype();
  args.m = N;
  args.n = M;
  args.k = K;
  args.batch = B;
  args.a = operand_of(b, keep_b);
  args.b = operand_of(a, keep_a);
  args.d = out.data_ptr();
  args.ldd = N;
  args.batch_stride_d = M * N;
  return args;
}

// out (B, M, N) contiguous = a (B, M, K) @ b (B, K, N), or += with accumulate, with an optional
// epilogue; aux (M, N) contiguous (B = 1) receives the pre-activation with the *Aux epilogues.
void gemm(const Tensor& out, const Tensor& a, const Tensor& b, LtEpilogue epi = LtEpilogue::None,
          const Tensor& bias = Tensor(), const Tensor& aux = Tensor(), bool accumulate = false) {
  if (out.numel() == 0) return;
  // An empty sum (K == 0); epilogues only come from linear_fused, which rejects K == 0.
  if (a.size(2) == 0) {
    if (!accumulate) cuda_backend().fill_(out, 0.0);
    return;
  }
  Tensor keep_a, keep_b;
  LtMatmulArgs args = gemm_args(out, a, b, keep_a, keep_b);
  args.accumulate = accumulate;
  args.epilogue = epi;
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.aux = aux.defined() ? aux.data_ptr() : nullptr;
  args.ld_aux = aux.defined() ? b.size(2) : 0;
  lt_matmul(args);
}

void check_cuda_floating(const char* op, const Tensor& t) {
  LOOM_CHECK(t.device().is_cuda(), op, ": expected a CUDA tensor, got ", describe(t));
  LOOM_CHECK(is_floating(t.dtype()), op, ": dtype ", dtype_name(t.dtype()),
             " is not supported (expected a floating type)");
}

}  // namespace

// a: (M, K), b: (K, N) -> (M, N)
Tensor CudaBackend::mm(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype) {
  check_cuda_floating("mm", a);
  check_mm_out_dtype("mm", a, out_dtype);
  Tensor out =
      empty({a.size(0), b.size(1)}, {.dtype = out_dtype.value_or(a.dtype()), .device = a.device()});
  gemm(raw::unsqueeze(out, 0), raw::unsqueeze(a, 0), raw::unsqueeze(b, 0));
  return out;
}

// out (M, N) contiguous = or += a (M, K) @ b (K, N)
void CudaBackend::mm_into_(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  check_cuda_floating("mm_into_", a);
  check_mm_into("mm_into_", out, a, b);
  gemm(raw::unsqueeze(out, 0), raw::unsqueeze(a, 0), raw::unsqueeze(b, 0), LtEpilogue::None,
       Tensor(), Tensor(), accumulate);
}

// a: (B, M, K), b: (B, K, N) -> (B, M, N)
Tensor CudaBackend::bmm(const Tensor& a, const Tensor& b) {
  check_cuda_floating("bmm", a);
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, {.dtype = a.dtype(), .device = a.device()});
  gemm(out, a, b);
  return out;
}

// x: (M, K), w: (N, K), bias: (N) or undefined -> (M, N)
// (GELU's pre-activation comes from cuBLASLt's aux output, whose leading dimension must be a
// multiple of 8: other widths compose.)
LinearOut CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                              LinearActivation act) {
  check_cuda_floating("linear", x);
  const bool gelu = act == LinearActivation::GeluTanh;
  if (x.dtype() == DType::F64 || x.size(1) == 0 || x.size(0) == 0 || w.size(0) == 0 ||
      (gelu && w.size(0) % 8 != 0))
    return linear_composite(*this, x, w, bias, act);
  if (gelu) {
    LinearOut out;
    out.y = linear_fused(x, w, bias, Activation::GeluTanh, &out.pre);
    return out;
  }
  return {
      linear_fused(x, w, bias, act == LinearActivation::Relu ? Activation::Relu : Activation::None),
      Tensor()};
}

// g: (M, N), w: (N, K), pre: (M, K) -> grad (M, K) = (g @ w) * gelu_tanh'(pre), bias (K) = its
// row sums (Note [Fused MLP] in autograd/ops/linalg.cpp): one product with cuBLASLt's DGELU
// epilogue (or the composite where cuBLASLt has no algorithm for it), the row sums after it.
// DGELU_BGRAD would make both, but on an H200 cuBLASLt 13 ran it as a plain product and a separate
// epilogue kernel, 0.33 ms against 0.17 ms for the DGELU product and 0.05 ms for the sums (GPT-2
// 124M's shapes).
GeluBackwardOut CudaBackend::mm_gelu_tanh_backward(const Tensor& g, const Tensor& w,
                                                   const Tensor& pre, bool bias) {
  check_cuda_floating("mm_gelu_tanh_backward", g);
  const int64_t M = g.size(0), N = g.size(1), K = w.size(1);
  if (g.dtype() == DType::F64 || M == 0 || N == 0 || K == 0 || K % 8 != 0 || !pre.is_contiguous())
    return mm_gelu_tanh_backward_composite(*this, g, w, pre, bias);
  Tensor out = empty({M, K}, {.dtype = g.dtype(), .device = g.device()});
  Tensor keep_a, keep_b;
  LtMatmulArgs args =
      gemm_args(raw::unsqueeze(out, 0), raw::unsqueeze(g, 0), raw::unsqueeze(w, 0), keep_a, keep_b);
  args.epilogue = LtEpilogue::DGeluTanh;
  args.aux = pre.data_ptr();  // read, not written
  args.ld_aux = K;
  if (!lt_matmul_if_supported(args)) return mm_gelu_tanh_backward_composite(*this, g, w, pre, bias);
  return {out, bias ? reduce(ReduceOp::Sum, out, {0}, false) : Tensor()};
}

// x: (..., K), w: (N, K), bias: (N) or undefined -> (..., N); *pre (..., N) with GeluTanh
Tensor linear_fused(const Tensor& x, const Tensor& w, const Tensor& bias, Activation act,
                    Tensor* pre) {
  LOOM_CHECK(x.defined() && w.defined(), "linear_fused: input and weight must be defined");
  LOOM_CHECK(x.device().is_cuda(), "linear_fused: expected CUDA tensors, got input ", describe(x));
  LOOM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F16 || x.dtype() == DType::BF16,
             "linear_fused: dtype ", dtype_name(x.dtype()),
             " is not supported (expected float32, float16 or bfloat16)");
  LOOM_CHECK(x.dim() >= 1 && w.dim() == 2,
             "linear_fused: expected input (..., K) and weight (N, K), got ", x.shape(), " and ",
             w.shape());
  int64_t K = x.size(-1), N = w.size(0);
  LOOM_CHECK(w.size(1) == K, "linear_fused: input ", x.shape(), " has ", K, " features, weight ",
             w.shape(), " expects ", w.size(1));
  LOOM_CHECK(K > 0, "linear_fused: input ", x.shape(), " has no features");
  LOOM_CHECK(w.dtype() == x.dtype() && w.device() == x.device(), "linear_fused: weight ",
             describe(w), " does not match input ", describe(x));
  Tensor b;
  if (bias.defined()) {
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == N, "linear_fused: bias ", bias.shape(),
               " does not match weight ", w.shape(), " (expected [", N, "])");
    LOOM_CHECK(bias.dtype() == x.dtype() && bias.device() == x.device(), "linear_fused: bias ",
               describe(bias), " does not match input ", describe(x));
    b = raw::contiguous(bias);
  }

  int64_t M = K == 0 ? 0 : x.numel() / K;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;

  Tensor x2;  // (M, K): a view when the leading dims merge, else a contiguous copy
  if (auto st = raw::view_strides(x.shape(), x.strides(), {M, K})) {
    x2 = make_view(x, {M, K}, *st, x.offset());
  } else {
    x2 = raw::view(raw::contiguous(x), {M, K});
  }
  const bool aux = pre != nullptr && act == Activation::GeluTanh;
  LOOM_CHECK(!aux || N % 8 == 0,
             "linear_fused: the GELU pre-activation needs N % 8 == 0, got N = ", N);
  if (aux) *pre = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  LtEpilogue epi = LtEpilogue::None;
  switch (act) {
    case Activation::None:
      epi = b.defined() ? LtEpilogue::Bias : LtEpilogue::None;
      break;
    case Activation::Relu:
      epi = b.defined() ? LtEpilogue::ReluBias : LtEpilogue::Relu;
      break;
    case Activation::GeluTanh:
      epi = aux ? (b.defined() ? LtEpilogue::GeluTanhAuxBias : LtEpilogue::GeluTanhAux)
                : (b.defined() ? LtEpilogue::GeluTanhBias : LtEpilogue::GeluTanh);
      break;
  }
  gemm(raw::view(out, {1, M, N}), raw::unsqueeze(x2, 0), raw::unsqueeze(raw::transpose(w, 0, 1), 0),
       epi, b, aux ? raw::view(*pre, {M, N}) : Tensor());
  return out;
}

}  // namespace loom::cuda
