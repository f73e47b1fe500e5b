// The CUDA elementwise launcher: out[i] = f(in[i]...) for the host-device functors of
// kernels/functors.h, with broadcasting and any strides. Contiguous operands take a grid-stride
// kernel with 16-byte vectorized loads and stores; others an offset calculator over the shape
// with adjacent dims merged (kernels/loop_geometry.h, shared with the CPU). A naive kernel (one
// element per thread, every dim walked) stays beside them as the reference. See Note
// [Elementwise launch].
// Leaves out: reductions (cuda_reduce.cu) and type promotion (operands arrive in their dtypes).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"
#include "kernels/cuda/launch.h"
#include "kernels/functors.h"
#include "kernels/loop_geometry.h"

namespace loom::cuda {

// Note [Elementwise launch]
// 1. The output shape and each operand's strides (0 along broadcast dims) are collapsed: a dim
//    merges into the one outside it when every operand walks the pair as one run. A contiguous
//    tensor, or contiguous operands with no broadcasting, become a single dim of stride 1.
// 2. Single-dim, stride-1 loops whose pointers are 16-byte aligned take contiguous_kernel: each
//    thread loads V elements of every operand at once, V = 16 bytes / the widest element type,
//    and walks the array with a grid-stride loop sized to one wave of the device (launch.h).
// 3. Everything else takes strided_kernel: each element's linear index is split into a
//    multi-index (innermost dim first) with 32-bit division when the element count allows it,
//    and each operand's offset is the dot product with its strides.
// The functor sees values converted to acc_t (float for f16/bf16) and its result is converted
// to the output type, exactly as on the CPU, so both backends compute the same function.

constexpr int kMaxDims = kMaxLoopDims;

template <int N>
struct OffsetCalc {
  int ndim = 0;
  int64_t sizes[kMaxDims];       // innermost first
  int64_t strides[kMaxDims][N];  // strides[d][k]: operand k (0 = output), in elements
};

// The loop geometry of `shape` with operand strides `st` (kernels/loop_geometry.h, shared with
// the CPU; dims merged when `collapse` is set), turned innermost first for offsets_of.
template <int N>
OffsetCalc<N> make_offset_calc(const Shape& shape, const std::array<Strides, N>& st,
                               bool collapse) {
  const LoopGeometry<N> L = loop_geometry<N>(shape, st, collapse);
  const int nd = L.ndim;
  OffsetCalc<N> oc;
  oc.ndim = nd;
  for (int d = 0; d < nd; ++d) {
    oc.sizes[d] = L.sizes[nd - 1 - d];
    for (int k = 0; k < N; ++k) oc.strides[d][k] = L.strides[k][nd - 1 - d];
  }
  return oc;
}

// Offsets of the element with linear index `i` (row-major over the shape) for every operand.
template <typename Index, int N>
__device__ __forceinline__ void offsets_of(const OffsetCalc<N>& oc, int64_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  Index lin = Index(i);
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == oc.ndim) break;
    Index size = Index(oc.sizes[d]);
    Index q = lin / size;
    int64_t r = int64_t(lin - q * size);
    lin = q;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += r * oc.strides[d][k];
  }
}

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <typename... Ts>
constexpr int vec_width() {
  size_t widest = std::max({sizeof(Ts)...});
  return int(std::max<size_t>(1, 16 / widest));
}

template <int V, typename T>
__device__ __forceinline__ Vec<T, V> load_vec(const T* p, int64_t i) {
  return reinterpret_cast<const Vec<T, V>*>(p)[i];
}

template <int V, typename Out, typename F, typename... Ins>
__device__ __forceinline__ void apply_vec(Out* out, int64_t i, const F& f,
                                          const Vec<Ins, V>&... in) {
  Vec<Out, V> r;
#pragma unroll
  for (int j = 0; j < V; ++j) r.v[j] = Out(f(acc_t<Ins>(in.v[j])...));
  reinterpret_cast<Vec<Out, V>*>(out)[i] = r;
}

template <typename Out, typename F, typename... Ins, size_t... K>
__device__ __forceinline__ void apply_at(Out* out, const int64_t* off, const F& f,
                                         std::index_sequence<K...>, const Ins*... in) {
  out[off[0]] = Out(f(acc_t<Ins>(in[off[K + 1]])...));
}

// Contiguous, aligned operands: V elements per thread per step, then the tail one by one.
template <int V, typename Out, typename F, typename... Ins>
__global__ void __launch_bounds__(kBlockSize)
    contiguous_kernel(int64_t n, F f, Out* out, const Ins*... in) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nv = n / V;
  for (int64_t i = first; i < nv; i += step) apply_vec<V>(out, i, f, load_vec<V>(in, i)...);
  for (int64_t i = nv * V + first; i < n; i += step) out[i] = Out(f(acc_t<Ins>(in[i])...));
}

// Any strides and broadcasting, over the collapsed shape.
template <typename Out, typename F, typename... Ins>
__global__ void __launch_bounds__(kBlockSize)
    strided_kernel(int64_t n, F f, OffsetCalc<1 + sizeof...(Ins)> oc, Out* out, const Ins*... in) {
  constexpr int N = 1 + sizeof...(Ins);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const bool small = n <= int64_t(UINT32_MAX);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[N];
    if (small)
      offsets_of<uint32_t>(oc, i, off);
    else
      offsets_of<uint64_t>(oc, i, off);
    apply_at(out, off, f, std::index_sequence_for<Ins...>{}, in...);
  }
}

// The reference: one thread per element, every dim of the original shape, 64-bit arithmetic.
template <typename Out, typename F, typename... Ins>
__global__ void naive_kernel(int64_t n, F f, OffsetCalc<1 + sizeof...(Ins)> oc, Out* out,
                             const Ins*... in) {
  constexpr int N = 1 + sizeof...(Ins);
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[N];
  offsets_of<uint64_t>(oc, i, off);
  apply_at(out, off, f, std::index_sequence_for<Ins...>{}, in...);
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// out = f(in...) elementwise on out's device and current stream. Out is the output element type,
// Ins the inputs' (one per tensor); inputs broadcast to out's shape. Tensors must be on one device.
template <typename Out, typename... Ins, typename F, typename... Ts>
void elementwise(const Tensor& out, const F& f, const Ts&... in) {
  static_assert(sizeof...(Ins) == sizeof...(Ts), "one element type per input tensor");
  constexpr int N = 1 + sizeof...(Ins);
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  std::array<Strides, N> st{out.strides(),
                            broadcast_strides(in.shape(), in.strides(), out.shape())...};
  Out* o = static_cast<Out*>(out.data_ptr());
  if (use_naive_kernels()) {
    OffsetCalc<N> oc = make_offset_calc<N>(out.shape(), st, /*collapse=*/false);
    naive_kernel<Out, F, Ins...><<<(n + kBlockSize - 1) / kBlockSize, kBlockSize, 0, stream>>>(
        n, f, oc, o, static_cast<const Ins*>(in.data_ptr())...);
    LOOM_CUDA_CHECK_LAUNCH("elementwise naive_kernel");
    return;
  }
  OffsetCalc<N> oc = make_offset_calc<N>(out.shape(), st, /*collapse=*/true);
  bool contiguous = oc.ndim == 0;
  if (oc.ndim == 1) {
    contiguous = true;
    for (int k = 0; k < N; ++k) contiguous = contiguous && oc.strides[0][k] == 1;
  }
  if (contiguous) {
    constexpr int V = vec_width<Out, Ins...>();
    bool aligned =
        aligned_to(o, sizeof(Out) * V) && (aligned_to(in.data_ptr(), sizeof(Ins) * V) && ...);
    if (aligned) {  // a misaligned view (a slice at an odd offset) takes the strided kernel below
      contiguous_kernel<V, Out, F, Ins...>
          <<<grid_for((n + V - 1) / V, dev), kBlockSize, 0, stream>>>(
              n, f, o, static_cast<const Ins*>(in.data_ptr())...);
      LOOM_CUDA_CHECK_LAUNCH("elementwise contiguous_kernel");
      return;
    }
  }
  strided_kernel<Out, F, Ins...><<<grid_for(n, dev), kBlockSize, 0, stream>>>(
      n, f, oc, o, static_cast<const Ins*>(in.data_ptr())...);
  LOOM_CUDA_CHECK_LAUNCH("elementwise strided_kernel");
}

// This launcher as the Loop type the shared front-end kernels/elementwise_ops.h takes (used by
// cuda_elementwise.cu and cuda_binary.cu).
struct CudaLoop {
  template <typename Out, typename... Ins, typename F, typename... Ts>
  static void run(const Tensor& out, const F& f, const Ts&... in) {
    elementwise<Out, Ins...>(out, f, in...);
  }
};

}  // namespace loom::cuda
