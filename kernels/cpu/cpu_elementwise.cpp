// CPU elementwise kernels: copy (with dtype conversion), fill, arange, random, and the unary,
// binary and ternary ops of kernels/functors.h, all through the iterator in kernels/cpu/loops.h.
#include <cmath>

#include "core/dispatch.h"
#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/loops.h"
#include "kernels/elementwise_ops.h"
#include "kernels/op_dispatch.h"

namespace loom::cpu {

void CpuBackend::copy_(const Tensor& dst, const Tensor& src) {
  LOOM_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
    using dst_t = scalar_t;
    LOOM_DISPATCH_ALL(src.dtype(), "copy_", [&] {
      elementwise<dst_t, scalar_t>(
          dst, [](acc_t<scalar_t> v) { return v; }, src);
    });
  });
}

void CpuBackend::fill_(const Tensor& t, double value) {
  LOOM_DISPATCH_ALL(t.dtype(), "fill_", [&] {
    scalar_t v = scalar_t(acc_t<scalar_t>(value));
    elementwise<scalar_t>(t, [v]() { return v; });
  });
}

void CpuBackend::arange_(const Tensor& t, double start, double step) {
  LOOM_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    scalar_t* p = t.data<scalar_t>();
    parallel_for(0, t.numel(), kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = scalar_t(acc_t<scalar_t>(start + double(i) * step));
    });
  });
}

void CpuBackend::random_(const Tensor& t, RandomKind kind, double a, double b, uint64_t seed,
                         uint64_t offset) {
  LOOM_DISPATCH_NUMERIC(t.dtype(), "random_", [&] {
    scalar_t* p = t.data<scalar_t>();
    bool f64 = t.dtype() == DType::F64 || kind == RandomKind::Int;
    parallel_for(0, t.numel(), kGrainSize / 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        double v;
        switch (kind) {
          case RandomKind::Uniform:
            v = a + (b - a) * philox_uniform(seed, offset, i, f64);
            break;
          case RandomKind::Normal:
            v = a + b * philox_normal(seed, offset, i);
            break;
          default:
            v = a + std::floor(philox_uniform(seed, offset, i, true) * (b - a));
            break;
        }
        p[i] = scalar_t(acc_t<scalar_t>(v));
      }
    });
  });
}

// The host side of these five is kernels/elementwise_ops.h, shared with the CUDA backend.
Tensor CpuBackend::unary(UnaryOp op, const Tensor& x) {
  return elementwise_ops::unary<CpuLoop>(op, x);
}
Tensor CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  return elementwise_ops::binary<CpuLoop>(op, a, b);
}
Tensor CpuBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  return elementwise_ops::binary_scalar<CpuLoop>(op, a, s, scalar_first);
}
void CpuBackend::binary_(BinaryOp op, const Tensor& a, const Tensor& b) {
  elementwise_ops::binary_<CpuLoop>(op, a, b);
}
Tensor CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return elementwise_ops::where<CpuLoop>(cond, a, b);
}

}  // namespace loom::cpu
