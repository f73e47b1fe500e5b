// CPU matrix products on cpu::gemm (OpenBLAS or Eigen, multi-threaded through the OpenMP pool:
// kernels/cpu/cpu_gemm.h). Row-major and transposed (column-major) views go in without a copy;
// any other layout is made contiguous first. f16/bf16 compute in float32.
#include <algorithm>

#include "core/dispatch.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

// Note [GEMM operand layouts]
// A 2-d operand goes to the GEMM without a copy when it is row-major (unit column stride, rows
// at least a row apart) or column-major (the mirror image); a dimension of size 1 may have any
// stride.
// Anything else is copied to contiguous first. "At least a row apart" matters: the gradient of a
// sum arrives broadcast, e.g. (N, 1) with strides (0, 1), and mapping that as column-major with
// leading dimension N would read N - 1 elements past its single stored value.
bool row_major(const Tensor& t) {
  return (t.size(1) == 1 || t.stride(1) == 1) && (t.size(0) == 1 || t.stride(0) >= t.size(1));
}
bool col_major(const Tensor& t) {
  return (t.size(0) == 1 || t.stride(0) == 1) && (t.size(1) == 1 || t.stride(1) >= t.size(0));
}

// A 2-d matrix as the GEMM can take it (Note [GEMM operand layouts]).
Tensor gemm_ready(const Tensor& m) {
  if (row_major(m) || col_major(m)) return m;
  return raw::contiguous(m);
}

// The stride between the stored rows of a gemm_ready operand: a column-major (M, K) matrix is
// the transpose of a row-major (K, M) one.
int64_t leading_dim(const Tensor& t, bool transposed) {
  const int d = transposed ? 1 : 0;  // the dimension that steps from one stored row to the next
  return t.size(d) == 1 ? t.size(1 - d) : t.stride(d);
}

// out (M, N), row-major contiguous, = (or += with accumulate) a (M, K) @ b (K, N), for float or
// double; a and b are gemm_ready.
template <typename T>
void gemm(const Tensor& a, const Tensor& b, T* out, bool accumulate = false) {
  GemmArgs<T> g;
  g.M = a.size(0), g.N = b.size(1), g.K = a.size(1);
  g.A = static_cast<const T*>(a.data_ptr());
  g.trans_a = !row_major(a);
  g.lda = leading_dim(a, g.trans_a);
  g.B = static_cast<const T*>(b.data_ptr());
  g.trans_b = !row_major(b);
  g.ldb = leading_dim(b, g.trans_b);
  g.C = out;
  g.ldc = g.N;
  g.accumulate = accumulate;
  cpu::gemm(g);
}

}  // namespace

Tensor CpuBackend::mm(const Tensor& a0, const Tensor& b0, std::optional<DType> out_dtype) {
  check_mm_out_dtype("mm", a0, out_dtype);
  Tensor out = empty({a0.size(0), b0.size(1)}, {.dtype = out_dtype.value_or(a0.dtype())});
  mm_into_(out, a0, b0, false);
  return out;
}

void CpuBackend::mm_into_(const Tensor& out, const Tensor& a0, const Tensor& b0, bool accumulate) {
  check_mm_into("mm_into_", out, a0, b0);
  if (a0.numel() == 0 || b0.numel() == 0) {  // an empty sum
    if (!accumulate) fill_(out, 0.0);
    return;
  }
  if (a0.dtype() == DType::F32 || a0.dtype() == DType::F64) {
    Tensor a = gemm_ready(a0), b = gemm_ready(b0);
    if (a.dtype() == DType::F32)
      gemm<float>(a, b, out.data<float>(), accumulate);
    else
      gemm<double>(a, b, out.data<double>(), accumulate);
    return;
  }
  LOOM_CHECK(is_floating(a0.dtype()), "mm_into_: dtype ", dtype_name(a0.dtype()),
             " is not supported (expected a floating type)");
  // Half precision on the CPU: compute in float32 and round once. A float32 out (mm's out_dtype)
  // takes the product, or the sum, as it is, without the rounding to 16 bits.
  Tensor a = raw::contiguous(raw::cast(a0, DType::F32)),
         b = raw::contiguous(raw::cast(b0, DType::F32));
  if (out.dtype() == DType::F32) {
    gemm<float>(a, b, out.data<float>(), accumulate);
    return;
  }
  Tensor o32 = accumulate ? raw::cast(out, DType::F32) : empty(out.shape(), {.dtype = DType::F32});
  gemm<float>(a, b, o32.data<float>(), accumulate);
  copy_(out, o32);
}

LinearOut CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor& bias,
                             LinearActivation act) {
  return linear_composite(*this, x, w, bias, act);
}

GeluBackwardOut CpuBackend::mm_gelu_tanh_backward(const Tensor& g, const Tensor& w,
                                                  const Tensor& pre, bool bias) {
  return mm_gelu_tanh_backward_composite(*this, g, w, pre, bias);
}

Tensor CpuBackend::bmm(const Tensor& a, const Tensor& b) {
  int64_t B = a.size(0);
  Tensor out = empty({B, a.size(1), b.size(2)}, {.dtype = a.dtype()});
  for (int64_t i = 0; i < B; ++i) {
    copy_(raw::select(out, 0, i), mm(raw::select(a, 0, i), raw::select(b, 0, i)));
  }
  return out;
}

}  // namespace loom::cpu
