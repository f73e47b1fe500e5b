// CPU matrix products on Eigen's GEMM (multi-threaded through the OpenMP pool). Row-major and
// transposed (column-major) views map without a copy; any other layout is made contiguous first.
// f16/bf16 compute in float32.
#include <Eigen/Core>

#include "core/dispatch.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// A 2-d matrix whose rows or columns are contiguous; anything else is copied to be so.
Tensor gemm_ready(const Tensor& m) {
  if (m.stride(1) == 1 || m.stride(0) == 1) return m;
  return raw::contiguous(m);
}

// out (M, N), row-major contiguous, = a (M, K) @ b (K, N), for float or double.
template <typename T>
void gemm(const Tensor& a, const Tensor& b, T* out) {
  int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  Eigen::Map<RowMat<T>> C(out, M, N);
  auto with_map = [](const Tensor& t, auto&& f) {
    const T* p = static_cast<const T*>(t.data_ptr());
    if (t.stride(1) == 1 && (t.stride(0) >= t.size(1) || t.size(0) == 1)) {
      f(Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>(
          p, t.size(0), t.size(1),
          Eigen::OuterStride<>(std::max<int64_t>(t.stride(0), t.size(1)))));
    } else {
      f(Eigen::Map<const ColMat<T>, 0, Eigen::OuterStride<>>(
          p, t.size(0), t.size(1),
          Eigen::OuterStride<>(std::max<int64_t>(t.stride(1), t.size(0)))));
    }
  };
  (void)K;
  with_map(a, [&](const auto& A) { with_map(b, [&](const auto& B) { C.noalias() = A * B; }); });
}

}  // namespace

Tensor CpuBackend::mm(const Tensor& a0, const Tensor& b0) {
  Tensor out = empty({a0.size(0), b0.size(1)}, {.dtype = a0.dtype()});
  if (a0.numel() == 0 || b0.numel() == 0) {
    fill_(out, 0.0);
    return out;
  }
  if (a0.dtype() == DType::F32 || a0.dtype() == DType::F64) {
    Tensor a = gemm_ready(a0), b = gemm_ready(b0);
    if (a.dtype() == DType::F32)
      gemm<float>(a, b, out.data<float>());
    else
      gemm<double>(a, b, out.data<double>());
    return out;
  }
  LOOM_CHECK(is_floating(a0.dtype()), "mm: dtype ", dtype_name(a0.dtype()),
             " is not supported (expected a floating type)");
  // Half precision on the CPU: compute in float32 and round once.
  Tensor a = raw::contiguous(raw::cast(a0, DType::F32)),
         b = raw::contiguous(raw::cast(b0, DType::F32));
  Tensor o32 = empty(out.shape(), {.dtype = DType::F32});
  gemm<float>(a, b, o32.data<float>());
  copy_(out, o32);
  return out;
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
