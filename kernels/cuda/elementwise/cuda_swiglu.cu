// CUDA SwiGLU backward (Backend::swiglu_backward, the fused section of
// kernels/backend_methods.inc): one pass over g, gate and up writing d gate and d up with the
// SwigluBackward functor of kernels/functors.h (shared with the CPU's loop,
// kernels/cpu/cpu_swiglu.cpp, the reference). The operands are read as rows: any row stride with
// contiguous columns (gate and up as the two halves of one (B, T, 2I) projection go in as they
// are), 16 bytes a load when every row allows it, one value at a time otherwise (also what
// use_naive_kernels runs); other layouts are copied first. Leaves out: the forward (the elementwise
// op Swiglu, cuda_binary.cu) and broadcasting.
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// An operand read as (R, C) rows: element (r, c) at p[r * row + c].
template <typename T>
struct Rows {
  const T* p;
  int64_t row;
};

// Thread i takes V consecutive values of a row: (r, c) = (i / (C / V), (i % (C / V)) V). The
// outputs are contiguous (R, C).
template <typename T, int V>
__global__ void __launch_bounds__(kBlockSize)
    swiglu_backward_kernel(Rows<T> g, Rows<T> gate, Rows<T> up, T* __restrict__ d_gate,
                           T* __restrict__ d_up, int64_t R, int64_t C) {
  using A = acc_t<T>;
  const int64_t per_row = C / V, n = R * per_row;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t r = i / per_row, c = (i % per_row) * V;
    const auto vg = *reinterpret_cast<const Vec<T, V>*>(g.p + r * g.row + c);
    const auto va = *reinterpret_cast<const Vec<T, V>*>(gate.p + r * gate.row + c);
    const auto vb = *reinterpret_cast<const Vec<T, V>*>(up.p + r * up.row + c);
    Vec<T, V> da, db;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      A x, y;
      SwigluBackward{}(A(vg.v[e]), A(va.v[e]), A(vb.v[e]), x, y);
      da.v[e] = T(x), db.v[e] = T(y);
    }
    *reinterpret_cast<Vec<T, V>*>(d_gate + r * C + c) = da;
    *reinterpret_cast<Vec<T, V>*>(d_up + r * C + c) = db;
  }
}

// t as (R, C) rows, C = t.size(-1): its columns contiguous and its leading dims one stride apart
// (`row`); false when they are not (the caller copies t first).
bool as_rows(const Tensor& t, int64_t& row) {
  const int64_t nd = t.dim(), C = nd == 0 ? 1 : t.size(-1);
  if (nd > 0 && C > 1 && t.stride(-1) != 1) return false;
  row = nd >= 2 ? t.stride(nd - 2) : C;
  for (int64_t d = nd - 3; d >= 0; --d)
    if (t.size(d) > 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return false;
  return true;
}

template <typename T>
Rows<T> rows_of(const Tensor& t, int64_t row) {
  return {t.data<T>(), row};
}

}  // namespace

// grad, gate, up: one shape -> (d gate, d up) contiguous
TensorPair CudaBackend::swiglu_backward(const Tensor& grad_in, const Tensor& gate_in,
                                        const Tensor& up_in) {
  check_swiglu_backward_args(grad_in, gate_in, up_in);
  Tensor ops[3] = {grad_in, gate_in, up_in};
  int64_t row[3];
  for (int i = 0; i < 3; ++i)
    if (!as_rows(ops[i], row[i])) as_rows(ops[i] = raw::contiguous(ops[i]), row[i]);
  const Options o{.dtype = gate_in.dtype(), .device = gate_in.device()};
  Tensor d_gate = empty(gate_in.shape(), o), d_up = empty(gate_in.shape(), o);
  const int64_t n = d_gate.numel(), C = gate_in.dim() == 0 ? 1 : gate_in.size(-1);
  if (n == 0) return {d_gate, d_up};
  const int dev = gate_in.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  LOOM_DISPATCH_FLOATING(gate_in.dtype(), "swiglu_backward", [&] {
    using T = scalar_t;
    constexpr int V = 16 / sizeof(T);
    bool wide = !use_naive_kernels() && C % V == 0 && aligned_to(d_gate.data_ptr(), 16) &&
                aligned_to(d_up.data_ptr(), 16);
    for (int i = 0; i < 3; ++i) wide = wide && row[i] % V == 0 && aligned_to(ops[i].data_ptr(), 16);
    const Rows<T> g = rows_of<T>(ops[0], row[0]), a = rows_of<T>(ops[1], row[1]),
                  b = rows_of<T>(ops[2], row[2]);
    if (wide)
      swiglu_backward_kernel<T, V><<<grid_for(n / V, dev), kBlockSize, 0, s>>>(
          g, a, b, d_gate.data<T>(), d_up.data<T>(), n / C, C);
    else
      swiglu_backward_kernel<T, 1><<<grid_for(n, dev), kBlockSize, 0, s>>>(
          g, a, b, d_gate.data<T>(), d_up.data<T>(), n / C, C);
  });
  LOOM_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
  return {d_gate, d_up};
}

}  // namespace loom::cuda
