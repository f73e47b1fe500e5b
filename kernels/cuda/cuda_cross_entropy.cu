// CUDA fused cross-entropy (Backend::cross_entropy and cross_entropy_backward; Note [Fused
// cross-entropy] in autograd/ops/softmax_loss.cpp), with the contracts of
// kernels/cpu/cpu_softmax_loss.cpp. Forward: a warp per row finds its max, then its sum of
// exponentials and of logits, and lane 0 forms the row's loss; Mean and Sum add the rows' losses
// in one block of 1024 threads (double, fixed order: deterministic), so the op caps its size (the
// op layer sends larger Mean/Sum losses to the composite). Backward: one grid-stride pass over (N,
// C). Leaves out: class weights.
#include <algorithm>
#include <limits>

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

struct Sum {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};
struct Max {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};

// x (N, C) with strides (s0, s1). Mean/Sum: one block of kReduceThreads, loss[0] and scale[0];
// None: any grid, loss[i] per row. Ignored rows (and rows whose target is out of range, which are
// reported) give 0 and are not counted.
// Latency, not bandwidth, bounds it at the mlp's size (256 rows of 10): a warp walks its rows one
// after another, so each row issues its loads (target and, for up to 32 classes, one logit per
// lane) before anything waits on them, and the target's logit comes from a shuffle. The first
// version (target, then logits, then the target's logit, 8 warps per block) measured 0.181 ms for
// the mlp graph step (the composite: 0.152 ms, in an earlier call); this one 0.157 against the
// composite's 0.152 in the same call, which is why the composite is the default (Note [Fused
// cross-entropy]).
constexpr int kReduceThreads = 1024;

template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    cross_entropy_kernel(const T* x, int64_t s0, int64_t s1, const int64_t* target, int64_t ts,
                         int64_t N, int64_t C, int64_t ignore, double ls, Reduction r, T* loss,
                         acc_t<T>* lse, double* scale, DeviceErrorSlot* err) {
  using A = acc_t<T>;
  const A ninf = -std::numeric_limits<A>::infinity();
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t nwarps = blockDim.x / kWarpSize;
  double total = 0, count = 0;  // in lane 0 of each warp
  for (int64_t i = blockIdx.x * nwarps + warp; i < N; i += gridDim.x * nwarps) {
    const T* xr = x + i * s0;
    const int64_t t = target[i * ts];  // the same in every lane: the branches stay warp-uniform
    const A first = lane < C ? A(xr[lane * s1]) : ninf;  // classes 0..31, one per lane
    double row = 0;
    if (t != ignore && (t < 0 || t >= C)) {
      if (lane == 0) report_device_error(err, DeviceOp::CrossEntropy, t, i, C);
    } else if (t != ignore) {
      A m = first;
      for (int64_t c = lane + kWarpSize; c < C; c += kWarpSize) m = Max{}(m, A(xr[c * s1]));
      m = warp_reduce(m, Max{});
      A s = lane < C ? math::exp(first - m) : A(0), sx = lane < C ? first : A(0);
      for (int64_t c = lane + kWarpSize; c < C; c += kWarpSize) {
        const A v = A(xr[c * s1]);
        s += math::exp(v - m);
        sx += v;
      }
      s = warp_reduce(s, Sum{});
      sx = warp_reduce(sx, Sum{});
      const A xt = C <= kWarpSize ? __shfl_sync(0xffffffffu, first, int(t)) : A(xr[t * s1]);
      const double l = double(m) + ::log(double(s));
      row = l - double(xt);
      if (ls != 0.0) row = (1.0 - ls) * row + (ls / double(C)) * (double(C) * l - double(sx));
      if (lane == 0) {
        lse[i] = A(l);
        count += 1;
      }
    }
    if (lane == 0) {
      if (t == ignore) lse[i] = A(0);
      total += row;
      if (r == Reduction::None) loss[i] = T(A(row));
    }
  }
  if (r == Reduction::None) {  // uniform: no thread reaches the block reduction
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale = 1.0;
    return;
  }
  total = block_reduce(total, Sum{}, 0.0);
  count = block_reduce(count, Sum{}, 0.0);
  if (threadIdx.x == 0) {
    loss[0] = T(A(r == Reduction::Sum ? total : total / count));
    *scale = r == Reduction::Mean ? 1.0 / count : 1.0;
  }
}

// out (N, C) contiguous = g_i * scale * (softmax - (1 - ls) onehot(t) - ls / C), 0 on ignored
// rows.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    cross_entropy_backward_kernel(const T* g, int64_t gs, const T* x, int64_t s0, int64_t s1,
                                  const int64_t* target, int64_t ts, const acc_t<T>* lse,
                                  const double* scale, int64_t N, int64_t C, int64_t ignore,
                                  double ls, T* out, DeviceErrorSlot* err) {
  using A = acc_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const A off = A(ls / double(C)), hit = A(1.0 - ls);
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * C; e += step) {
    const int64_t i = e / C, c = e - i * C;
    const int64_t t = target[i * ts];
    A v = A(0);
    if (t != ignore && (t < 0 || t >= C)) {
      if (c == 0) report_device_error(err, DeviceOp::CrossEntropyBackward, t, i, C);
    } else if (t != ignore) {
      const A gi = A(double(A(g[i * gs])) * *scale);
      A d = math::exp(A(x[i * s0 + c * s1]) - lse[i]) - off;
      if (c == t) d -= hit;
      v = gi * d;
    }
    out[e] = T(v);
  }
}

}  // namespace

// logits: (N, C), target: (N) int64 -> loss 0-d (Mean, Sum) or (N) (None), lse (N), scale 0-d
CrossEntropyOut CudaBackend::cross_entropy(const Tensor& logits, const Tensor& target, Reduction r,
                                           double label_smoothing, int64_t ignore_index) {
  LOOM_CHECK(target.dtype() == DType::I64 && target.dim() == 1 && logits.dim() == 2 &&
                 logits.size(0) == target.size(0) && target.device() == logits.device(),
             "cross_entropy: logits ", describe(logits), " and target ", describe(target),
             " must be (N, C) and (N) int64 on one device");
  const int64_t N = logits.size(0), C = logits.size(1);
  const Device d = logits.device();
  const DType acc = logits.dtype() == DType::F64 ? DType::F64 : DType::F32;
  CrossEntropyOut out{
      empty(r == Reduction::None ? Shape{N} : Shape{}, {.dtype = logits.dtype(), .device = d}),
      empty({N}, {.dtype = acc, .device = d}), empty({}, {.dtype = DType::F64, .device = d})};
  const int dev = d.index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  // Mean/Sum: one block (deterministic total); None: a warp per row over as many blocks as needed.
  const int threads = r == Reduction::None ? kBlockSize : kReduceThreads;
  const int64_t warps_per_block = threads / kWarpSize;
  const int64_t grid =
      r == Reduction::None
          ? std::clamp<int64_t>((N + warps_per_block - 1) / warps_per_block, 1, 65535)
          : 1;
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy", [&] {
    cross_entropy_kernel<scalar_t><<<grid, threads, 0, s>>>(
        logits.data<scalar_t>(), logits.stride(0), logits.stride(1), target.data<int64_t>(),
        target.stride(0), N, C, ignore_index, label_smoothing, r, out.loss.data<scalar_t>(),
        out.lse.data<acc_t<scalar_t>>(), out.scale.data<double>(), device_error_slot(dev));
  });
  LOOM_CUDA_CHECK_LAUNCH("cross_entropy_kernel");
  return out;
}

// grad: 0-d (Mean, Sum) or (N) (None) -> dL/dlogits: (N, C) contiguous
Tensor CudaBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                           const Tensor& target, const Tensor& lse,
                                           const Tensor& scale, Reduction r, double label_smoothing,
                                           int64_t ignore_index) {
  const int64_t N = logits.size(0), C = logits.size(1);
  LOOM_CHECK(r == Reduction::None ? (grad.dim() == 1 && grad.size(0) == N) : grad.numel() == 1,
             "cross_entropy_backward: grad ", describe(grad), " does not fit the reduction of ", N,
             " rows");
  Tensor out = empty({N, C}, {.dtype = logits.dtype(), .device = logits.device()});
  if (N * C == 0) return out;
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  cudaStream_t s = current_stream(dev);
  const Tensor g = raw::cast(grad, logits.dtype());  // already it, from the loss: no copy
  const int64_t gs = r == Reduction::None ? g.stride(0) : 0;
  LOOM_DISPATCH_FLOATING(logits.dtype(), "cross_entropy_backward", [&] {
    cross_entropy_backward_kernel<scalar_t><<<grid_for(N * C, dev), kBlockSize, 0, s>>>(
        g.data<scalar_t>(), gs, logits.data<scalar_t>(), logits.stride(0), logits.stride(1),
        target.data<int64_t>(), target.stride(0), lse.data<acc_t<scalar_t>>(), scale.data<double>(),
        N, C, ignore_index, label_smoothing, out.data<scalar_t>(), device_error_slot(dev));
  });
  LOOM_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
  return out;
}

}  // namespace loom::cuda
