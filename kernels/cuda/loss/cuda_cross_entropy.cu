// CUDA fused cross-entropy (Backend::cross_entropy and cross_entropy_backward; Note [Fused
// cross-entropy] in autograd/ops/softmax_loss.cpp), with the contracts of
// kernels/cpu/cpu_softmax_loss.cpp. Forward: a warp per row makes one online pass over its logits
// (running max and sum of exponentials, and the sum of logits for label smoothing) and lane 0
// writes the row's loss and log-sum-exp; Mean and Sum then add the rows' losses in one block
// (double, fixed order: deterministic). Backward: a block per row writes
// g * (softmax - onehot) in the logits' dtype. Logits may be float16/bfloat16 (a language model's
// (B*T, V) under autocast): they are read as they are and accumulated in float32, so the (N, C)
// float32 copy and log-probabilities of the composite never exist. cross_entropy_with_grad_ makes
// the forward and the gradient in one pass over each row (Note [Cross-entropy and its gradient in
// one pass]). Leaves out: class weights. Contiguous rows are read in 16-byte packs
// (Note [Vector loads of the logits]).
#include <cuda_pipeline.h>

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>

#include "core/cuda/available.h"
#include "core/cuda/check.h"
#include "core/cuda/device_error.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/functors.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Online log-sum-exp]
// One pass keeps a running maximum m and s = sum exp(x - m): a new x > m rescales s by
// exp(m - x) first. Two partial (m, s) pairs combine as (M, s1 exp(m1 - M) + s2 exp(m2 - M)) with
// M = max(m1, m2); a lane that saw no logit (C < 32) holds (-inf, 0) and is skipped, so no
// exp(-inf - -inf) = NaN appears. Reading each logit once is what the 50k-wide rows of a language
// model need: the naive max pass then exp pass reads 100 KB per row twice.
template <typename A>
struct MaxSum {
  A m, s;
  __device__ __forceinline__ void add(A v) {
    if (v > m) {
      s = s * math::exp(m - v) + A(1);
      m = v;
    } else {
      s += math::exp(v - m);
    }
  }
  __device__ __forceinline__ void merge(A m2, A s2) {
    if (s2 == A(0)) return;
    if (s == A(0)) {
      m = m2, s = s2;
      return;
    }
    const A M = m2 > m ? m2 : m;
    s = s * math::exp(m - M) + s2 * math::exp(m2 - M);
    m = M;
  }
};

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_merge(MaxSum<A> p) {
  for (int off = kWarpSize / 2; off > 0; off /= 2)
    p.merge(__shfl_xor_sync(0xffffffffu, p.m, off), __shfl_xor_sync(0xffffffffu, p.s, off));
  return p;
}

// Note [Vector loads of the logits]
// A row of GPT-2's logits is 50304 bfloat16 values. Read one per lane per step, a warp issues a
// 64-byte load and waits on it before the next, and the forward moved 1.2 TB/s on an H200
// (1.40 ms for 1.65 GB). With V = 16 / sizeof(T) values per 16-byte load (8 in bfloat16) each
// lane has a whole vector in flight per step; both kernels take that path when the rows are
// contiguous, 16-byte aligned and C % V == 0, and V = 1 (any strides) otherwise.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Whether x (N, C) with strides (s0, s1) can be read in packs of V.
template <typename T, int V>
bool packs_fit(const T* x, int64_t s0, int64_t s1, int64_t C) {
  return V > 1 && s1 == 1 && C % V == 0 && s0 % V == 0 &&
         reinterpret_cast<uintptr_t>(x) % (sizeof(T) * V) == 0;
}

// x (N, C) with strides (s0, s1) -> row_loss (N), lse (N), both in A. A warp per row; ignored
// rows (and rows whose target is out of range, which are reported) give loss 0 and lse 0.
// scale_one (Reduction::None only) gets 1. V > 1: packs of V (s1 == 1, Note [Vector loads of the
// logits]).
template <typename T, int V>
__global__ void __launch_bounds__(kBlockSize)
    cross_entropy_rows_kernel(const T* x, int64_t s0, int64_t s1, const int64_t* target, int64_t ts,
                              int64_t N, int64_t C, int64_t ignore, double ls, acc_t<T>* row_loss,
                              acc_t<T>* lse, double* scale_one, DeviceErrorSlot* err) {
  using A = acc_t<T>;
  if (scale_one && blockIdx.x == 0 && threadIdx.x == 0) *scale_one = 1.0;  // Reduction::None
  const int lane = threadIdx.x % kWarpSize;
  const int64_t nwarps = blockDim.x / kWarpSize;
  for (int64_t i = blockIdx.x * nwarps + threadIdx.x / kWarpSize; i < N; i += gridDim.x * nwarps) {
    const T* xr = x + i * s0;
    const int64_t t = target[i * ts];  // the same in every lane: the branches stay warp-uniform
    A row = A(0), l = A(0);
    if (t != ignore && (t < 0 || t >= C)) {
      if (lane == 0) report_device_error(err, DeviceOp::CrossEntropy, t, i, C);
    } else if (t != ignore) {
      MaxSum<A> p{-std::numeric_limits<A>::infinity(), A(0)};
      A sx = A(0);
      for (int64_t c = int64_t(lane) * V; c < C; c += int64_t(kWarpSize) * V) {
        if constexpr (V == 1) {
          const A v = A(xr[c * s1]);
          p.add(v);
          sx += v;
        } else {
          const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(xr + c);
#pragma unroll
          for (int u = 0; u < V; ++u) {
            const A v = A(pk.v[u]);
            p.add(v);
            sx += v;
          }
        }
      }
      p = warp_merge(p);
      sx = warp_reduce(sx, Plus{});
      l = p.m + math::log(p.s);
      row = l - A(xr[t * s1]);  // -log softmax at the target
      if (ls != 0.0) row = A((1.0 - ls) * double(row) + (ls / double(C)) * (double(C) * l - sx));
    }
    if (lane == 0) {
      row_loss[i] = row;
      lse[i] = l;
    }
  }
}

// Mean or Sum of the rows' losses in one block, in a fixed order: loss[0], and scale[0] = 1 /
// (rows counted) for Mean, 1 for Sum.
template <typename A>
__global__ void __launch_bounds__(1024)
    cross_entropy_total_kernel(const A* row_loss, const int64_t* target, int64_t ts, int64_t N,
                               int64_t ignore, Reduction r, A* loss, double* scale) {
  double total = 0, count = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    total += double(row_loss[i]);
    count += target[i * ts] != ignore;
  }
  total = block_reduce(total, Plus{}, 0.0);
  count = block_reduce(count, Plus{}, 0.0);
  if (threadIdx.x == 0) {
    loss[0] = A(r == Reduction::Sum ? total : total / count);  // NaN with no counted row
    *scale = r == Reduction::Mean ? 1.0 / count : 1.0;
  }
}

// out (N, C) contiguous = g_i * scale * (softmax - (1 - ls) onehot(t) - ls / C), 0 on ignored
// rows. A block per row (grid-strided), its threads across the row's classes, V at a time.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockSize)
    cross_entropy_backward_kernel(const acc_t<T>* g, int64_t gs, const T* x, int64_t s0, int64_t s1,
                                  const int64_t* target, int64_t ts, const acc_t<T>* lse,
                                  const double* scale, int64_t N, int64_t C, int64_t ignore,
                                  double ls, T* out, DeviceErrorSlot* err) {
  using A = acc_t<T>;
  const A off = A(ls / double(C)), hit = A(1.0 - ls);
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int64_t t = target[i * ts];
    const bool counted = t == ignore ? false : t >= 0 && t < C;
    if (t != ignore && !counted && threadIdx.x == 0)
      report_device_error(err, DeviceOp::CrossEntropyBackward, t, i, C);
    const A gi = counted ? A(double(g[i * gs]) * *scale) : A(0), li = counted ? lse[i] : A(0);
    const T* xr = x + i * s0;
    T* orow = out + i * C;
    // d/dlogit at column c of logit v (0 on ignored rows)
    auto grad = [&](int64_t c, A v) {
      A d = math::exp(v - li) - off;
      if (c == t) d -= hit;
      return T(counted ? gi * d : A(0));
    };
    for (int64_t c = int64_t(threadIdx.x) * V; c < C; c += int64_t(blockDim.x) * V) {
      if constexpr (V == 1) {
        orow[c] = grad(c, A(xr[c * s1]));
      } else {
        const Pack<T, V> in = *reinterpret_cast<const Pack<T, V>*>(xr + c);
        Pack<T, V> o;
#pragma unroll
        for (int u = 0; u < V; ++u) o.v[u] = grad(c + u, A(in.v[u]));
        *reinterpret_cast<Pack<T, V>*>(orow + c) = o;
      }
    }
  }
}

struct Max {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a > b ? a : b;
  }
};

// Note [Cross-entropy and its gradient in one pass]
// Backend::cross_entropy_with_grad_ for contiguous rows that fit in shared memory: a block per
// row copies the row once from global memory into shared memory (cp.async: every pack of the
// row in flight at once) and finds the row's maximum; then the sum of exp(x - max) (and of the
// logits, for label smoothing) from that copy, the row's loss and log-sum-exp; then it writes the
// Sum's gradient softmax - (1 - ls) onehot - ls / C over the row. Each thread reads back only the
// packs it stored, so only the two block sums synchronise. The row is read once and written once;
// the forward and backward kernels above read it twice and write it once (for GPT-2's 16384 x 50304
// bfloat16 logits, 1.65 GB a read). A row of that vocabulary is 100.6 KB: two blocks fit in an
// H200 SM's 227 KB, so one reads while the other computes. Ignored rows get zeros. Measured on an
// H200 (bench_gpu_kernels --only cross-entropy, 16384 x 50304 bf16): 1.31 ms, against 1.46 ms for
// the two kernels and a floor of 0.78 ms (the bytes at copy speed). Tried and slower: the row in
// registers (2.85 ms: too few rows in flight), plain loads instead of cp.async (1.79 ms: each
// thread waited on one load at a time), and one block of 1024 threads per SM copying its next
// row into a second buffer while working on this one (1.62 ms).
constexpr int kRowThreads = 512;

// exp(v) for v <= 0 (a logit less the row's maximum or log-sum-exp): the hardware's exp2 (a few
// ulps, below what the bfloat16 gradient or a float32 sum of 50k terms keeps); float64 exactly.
template <typename A>
__device__ __forceinline__ A fast_exp(A v) {
  if constexpr (std::is_same_v<A, float>)
    return __expf(v);
  else
    return math::exp(v);
}

template <typename T, int V>
__global__ void __launch_bounds__(kRowThreads, 2)
    cross_entropy_with_grad_kernel(T* x, const int64_t* target, int64_t ts, int64_t N, int64_t C,
                                   int64_t ignore, double ls, acc_t<T>* row_loss, acc_t<T>* lse,
                                   DeviceErrorSlot* err) {
  using A = acc_t<T>;
  using P = Pack<T, V>;
  extern __shared__ __align__(16) unsigned char row_bytes[];
  P* row = reinterpret_cast<P*>(row_bytes);  // C / V packs
  const int64_t packs = C / V;
  const A off = A(ls / double(C)), hit = A(1.0 - ls);
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    P* xr = reinterpret_cast<P*>(x + i * C);
    const int64_t t = target[i * ts];  // the same in every thread: the branches stay uniform
    if (t == ignore || t < 0 || t >= C) {
      if (t != ignore && threadIdx.x == 0)
        report_device_error(err, DeviceOp::CrossEntropy, t, i, C);
      if (threadIdx.x == 0) row_loss[i] = A(0), lse[i] = A(0);
      for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) xr[j] = P{};
      continue;
    }
    // All of this thread's packs in flight at once (cp.async: global to shared, no registers).
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x)
      __pipeline_memcpy_async(row + j, xr + j, sizeof(P));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      const P p = row[j];
#pragma unroll
      for (int u = 0; u < V; ++u) m = Max{}(m, A(p.v[u]));
    }
    m = block_reduce(m, Max{}, -std::numeric_limits<A>::infinity());
    A s = A(0), sx = A(0);
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      const P p = row[j];
#pragma unroll
      for (int u = 0; u < V; ++u) {
        const A v = A(p.v[u]);
        s += fast_exp(v - m);
        sx += v;
      }
    }
    s = block_reduce(s, Plus{}, A(0));
    if (ls != 0.0) sx = block_reduce(sx, Plus{}, A(0));
    const A l = m + math::log(s);
    if (threadIdx.x == 0) {                 // row[] is whole: the block sums synchronised the block
      A loss = l - A(row[t / V].v[t % V]);  // -log softmax at the target
      if (ls != 0.0) loss = A((1.0 - ls) * double(loss) + (ls / double(C)) * (double(C) * l - sx));
      row_loss[i] = loss;
      lse[i] = l;
    }
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      const P p = row[j];
      P o;
#pragma unroll
      for (int u = 0; u < V; ++u) {
        A d = fast_exp(A(p.v[u]) - l) - off;
        if (j * V + u == t) d -= hit;
        o.v[u] = T(d);
      }
      xr[j] = o;
    }
    __syncthreads();  // thread 0 read row[t / V] above: no thread overwrites it before that
  }
}

// The shared memory a block may have on this device (once per process and device).
int64_t max_row_bytes(int dev) {
  static std::array<int, kMaxCudaDevices> bytes{};
  if (bytes[size_t(dev)] == 0) {
    int v = 0;
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    bytes[size_t(dev)] = v - 1024;  // room for block_reduce's static arrays
  }
  return bytes[size_t(dev)];
}

}  // namespace

// logits: (N, C), target: (N) int64 -> loss 0-d (Mean, Sum) or (N) (None) and lse (N), both
// float32 (float64 for f64 logits), scale 0-d float64
CrossEntropyOut CudaBackend::cross_entropy(const Tensor& logits, const Tensor& target, Reduction r,
                                           double label_smoothing, int64_t ignore_index) {
  LOOM_CHECK(target.dtype() == DType::I64 && target.dim() == 1 && logits.dim() == 2 &&
                 logits.size(0) == target.size(0) && target.device() == logits.device(),
             "cross_entropy: logits ", describe(logits), " and target ", describe(target),
             " must be (N, C) and (N) int64 on one device");
  const int64_t N = logits.size(0), C = logits.size(1);
  const Device d = logits.device();
  const DType acc = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor rows = empty({N}, {.dtype = acc, .device = d});
  CrossEntropyOut out{r == Reduction::None ? rows : empty({}, {.dtype = acc, .device = d}),
                      empty({N}, {.dtype = acc, .device = d}),
                      empty({}, {.dtype = DType::F64, .device = d})};
  const int dev = d.index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  const int64_t warps_per_block = kBlockSize / kWarpSize;
  const int64_t grid = std::clamp<int64_t>((N + warps_per_block - 1) / warps_per_block, 1, 65535);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    using A = acc_t<scalar_t>;
    constexpr int V = 16 / sizeof(scalar_t);
    const scalar_t* x = logits.data<scalar_t>();
    const bool packed = packs_fit<scalar_t, V>(x, logits.stride(0), logits.stride(1), C);
    auto kernel =
        packed ? cross_entropy_rows_kernel<scalar_t, V> : cross_entropy_rows_kernel<scalar_t, 1>;
    kernel<<<grid, kBlockSize, 0, s>>>(
        x, logits.stride(0), logits.stride(1), target.data<int64_t>(), target.stride(0), N, C,
        ignore_index, label_smoothing, rows.data<A>(), out.lse.data<A>(),
        r == Reduction::None ? out.scale.data<double>() : nullptr, device_error_slot(dev));
    LOOM_CUDA_CHECK_LAUNCH("cross_entropy_rows_kernel");
    if (r == Reduction::None) return;
    cross_entropy_total_kernel<A><<<1, 1024, 0, s>>>(rows.data<A>(), target.data<int64_t>(),
                                                     target.stride(0), N, ignore_index, r,
                                                     out.loss.data<A>(), out.scale.data<double>());
    LOOM_CUDA_CHECK_LAUNCH("cross_entropy_total_kernel");
  });
  return out;
}

// grad: 0-d (Mean, Sum) or (N) (None), any floating dtype -> dL/dlogits: (N, C) contiguous, the
// logits' dtype
Tensor CudaBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                           const Tensor& target, const Tensor& lse,
                                           const Tensor& scale, Reduction r, double label_smoothing,
                                           int64_t ignore_index, const Tensor& into) {
  const int64_t N = logits.size(0), C = logits.size(1);
  LOOM_CHECK(r == Reduction::None ? (grad.dim() == 1 && grad.size(0) == N) : grad.numel() == 1,
             "cross_entropy_backward: grad ", describe(grad), " does not fit the reduction of ", N,
             " rows");
  check_ce_into(into, logits);
  Tensor out =
      into.defined() ? into : empty({N, C}, {.dtype = logits.dtype(), .device = logits.device()});
  if (N * C == 0) return out;
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  const int64_t gs = r == Reduction::None ? grad.stride(0) : 0;
  const int64_t grid = std::min<int64_t>(N, 65535);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy_backward", [&] {
    using A = acc_t<scalar_t>;
    const Tensor g = raw::cast(grad, lse.dtype());  // already it, from the loss: no copy
    constexpr int V = 16 / sizeof(scalar_t);
    const scalar_t* x = logits.data<scalar_t>();
    const bool packed = packs_fit<scalar_t, V>(x, logits.stride(0), logits.stride(1), C);
    auto kernel = packed ? cross_entropy_backward_kernel<scalar_t, V>
                         : cross_entropy_backward_kernel<scalar_t, 1>;
    kernel<<<grid, kBlockSize, 0, s>>>(g.data<A>(), gs, x, logits.stride(0), logits.stride(1),
                                       target.data<int64_t>(), target.stride(0), lse.data<A>(),
                                       scale.data<double>(), N, C, ignore_index, label_smoothing,
                                       out.data<scalar_t>(), device_error_slot(dev));
  });
  LOOM_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
  return out;
}

// logits (N, C) contiguous, r Mean or Sum -> the forward, and the Sum's gradient written over
// the logits: one pass (Note [Cross-entropy and its gradient in one pass]) when a row fits in a
// block's shared memory, else the forward and backward kernels above.
CrossEntropyOut CudaBackend::cross_entropy_with_grad_(const Tensor& logits, const Tensor& target,
                                                      Reduction r, double label_smoothing,
                                                      int64_t ignore_index) {
  LOOM_CHECK(target.dtype() == DType::I64 && target.dim() == 1 && logits.dim() == 2 &&
                 logits.size(0) == target.size(0) && target.device() == logits.device() &&
                 logits.is_contiguous() && r != Reduction::None,
             "cross_entropy_with_grad_: logits ", describe(logits), " and target ",
             describe(target),
             " must be contiguous (N, C) and (N) int64 on one device, the reduction Mean or Sum");
  const int64_t N = logits.size(0), C = logits.size(1);
  const Device d = logits.device();
  const DType acc = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const int64_t bytes = C * int64_t(dtype_size(logits.dtype()));
  bool one_pass = false;
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy_with_grad_", [&] {
    constexpr int V = 16 / sizeof(scalar_t);
    one_pass = N > 0 && bytes <= max_row_bytes(d.index) &&
               packs_fit<scalar_t, V>(logits.data<scalar_t>(), C, 1, C);
  });
  if (!one_pass)
    return cross_entropy_with_grad_composed(*this, logits, target, r, label_smoothing,
                                            ignore_index);
  Tensor rows = empty({N}, {.dtype = acc, .device = d});
  CrossEntropyOut out{empty({}, {.dtype = acc, .device = d}),
                      empty({N}, {.dtype = acc, .device = d}),
                      empty({}, {.dtype = DType::F64, .device = d})};
  const int dev = d.index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy_with_grad_", [&] {
    using A = acc_t<scalar_t>;
    constexpr int V = 16 / sizeof(scalar_t);
    auto kernel = cross_entropy_with_grad_kernel<scalar_t, V>;
    // Rows above the default 48 KB: opt in to all the device has, once per dtype and device (an
    // eager step runs it before any CUDA graph capture).
    static std::array<bool, kMaxCudaDevices> opted{};
    if (!opted[size_t(dev)]) {
      LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(max_row_bytes(dev))));
      opted[size_t(dev)] = true;
    }
    const int64_t threads = std::clamp<int64_t>((C / V + kWarpSize - 1) / kWarpSize * kWarpSize,
                                                kWarpSize, kRowThreads);
    kernel<<<unsigned(std::min<int64_t>(N, 65535)), unsigned(threads), size_t(bytes), s>>>(
        logits.data<scalar_t>(), target.data<int64_t>(), target.stride(0), N, C, ignore_index,
        label_smoothing, rows.data<A>(), out.lse.data<A>(), device_error_slot(dev));
    LOOM_CUDA_CHECK_LAUNCH("cross_entropy_with_grad_kernel");
    cross_entropy_total_kernel<A><<<1, 1024, 0, s>>>(rows.data<A>(), target.data<int64_t>(),
                                                     target.stride(0), N, ignore_index, r,
                                                     out.loss.data<A>(), out.scale.data<double>());
    LOOM_CUDA_CHECK_LAUNCH("cross_entropy_total_kernel");
  });
  return out;
}

}  // namespace loom::cuda
