// CUDA batch normalisation with the CPU backend's contract (kernels/cpu/cpu_norm.cpp, Note [Batch
// norm formulas]): training forward with batch statistics and the in-place running-stat update
// (unbiased variance), eval forward with the running statistics, and the training backward.
// x is read as (N, C, L), L the product of the trailing dims. f16/bf16 accumulate in float32,
// f64 in float64; save_mean/save_invstd are float32 (float64 for f64 inputs).
// Channels-last inputs keep their layout (their passes: cuda_batch_norm_cl.cu; the finalize is
// shared). Leaves out: the eval backward (elementwise, in the op layer), cuDNN's batch norm. The
// naive reference beside the fast statistics pass: bn_stats_naive_kernel (two passes).
#include <algorithm>
#include <cmath>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/norm/cuda_batch_norm.h"
#include "kernels/cuda/norm/cuda_batch_norm_finalize.cuh"
#include "kernels/cuda/norm/welford.cuh"
#include "kernels/cuda/vector_walk.cuh"
#include "kernels/functors.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

// Note [Split Welford]
// One block per channel leaves most of an H200 idle when C is 32..128 (the cnn workload) and
// each channel holds 200k values. So channel c is split over S blocks (grid (S, C)); each thread
// sums its strided share (Note [Shifted sums]) into a Welford state (count, mean, M2), the block
// merges the threads' states with Chan et al.'s pairwise formula through warp shuffles, and a
// per-channel finalize kernel merges the S block partials in float64. Merging (count, mean, M2)
// rather than adding sums and sums of squares keeps the variance accurate when |mean| >> std.
// Threads read vectors and find them without a division per load (Note [Vector walks]).

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct NormGeom {
  int64_t N, C, L, M;  // M = N * L values per channel
};

NormGeom norm_geom(const Tensor& x) {
  int64_t N = x.size(0), C = x.size(1);
  int64_t L = N * C == 0 ? 0 : x.numel() / (N * C);
  return {N, C, L, N * L};
}

int64_t splits_for(const NormGeom& g, int device) { return bn_splits(g.C, g.M, device); }

// Merges the block's Welford states; thread 0 ends with the block's.
template <typename A>
__device__ void block_merge(Welford<A>& w) {
  __shared__ int64_t sn[kWarps];
  __shared__ A smean[kWarps], sm2[kWarps];
  for (int off = 16; off > 0; off /= 2) {
    int64_t nb = __shfl_down_sync(0xffffffffu, w.n, off);
    A mb = __shfl_down_sync(0xffffffffu, w.mean, off),
      m2b = __shfl_down_sync(0xffffffffu, w.m2, off);
    w.merge(nb, mb, m2b);
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sn[warp] = w.n, smean[warp] = w.mean, sm2[warp] = w.m2;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 1; i < kWarps; ++i) w.merge(sn[i], smean[i], sm2[i]);
}

// Sums a value over the block; thread 0 gets the total.
template <typename A>
__device__ A block_sum(A v) {
  __shared__ A s[kWarps];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  __syncthreads();  // s may still be read by a previous call
  if (threadIdx.x % 32 == 0) s[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int i = 1; i < kWarps; ++i) v += s[i];
  return v;
}

// Loads in flight per thread in the channel reductions.
constexpr int kUnroll = 4;

// Note [Shifted sums]
// Each thread sums d = x - K and d^2 over its share, K = channel c's first value, and turns them
// into its Welford state (n, mean, M2) = (n, K + s1/n, s2 - s1^2/n) once at the end; the block
// then merges the threads' states (Chan et al.) as before. Two FMAs per value instead of a
// division per value (Welford's update). K is one of the channel's own values, so d is of the
// size of the spread rather than of the mean, and s2 - s1^2/n loses only a factor
// (1 + (mean - K)^2 / var) of float32's precision: nothing when |mean| >> std, where the plain sum
// of squares would lose every digit.
//
// x: (N, C, L) -> Welford partials (C, S): count, mean, M2 of each block's share, read as vectors
// of V (Note [Vector walks]).
template <typename T, int V>
__global__ void bn_stats_partial_kernel(const T* __restrict__ x, NormGeom g,
                                        int64_t* __restrict__ pn, acc_t<T>* __restrict__ pmean,
                                        acc_t<T>* __restrict__ pm2) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x, Lv = g.L / V, Mv = g.N * Lv;
  const int64_t chunk = (Mv + S - 1) / S, t0 = s * chunk, t1 = min(Mv, t0 + chunk);
  const VT* xv = reinterpret_cast<const VT*>(x);
  const A K = A(x[c * g.L]);
  A s1 = 0, s2 = 0;
  int64_t count = 0;
  for (Walk w(t0 + threadIdx.x, blockDim.x, Lv); w.t < t1;) {
    VT v[kUnroll];
    int got = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u, w.next(blockDim.x, Lv))
      if (w.t < t1) v[u] = xv[(w.a * g.C + c) * Lv + w.l], got = u + 1;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (u < got)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          A d = A(v[u].v[j]) - K;
          s1 += d;
          s2 += d * d;
        }
    count += int64_t(got) * V;
  }
  Welford<A> w = Welford<A>::from_shifted(count, K, s1, s2);
  block_merge(w);
  if (threadIdx.x == 0) pn[c * S + s] = w.n, pmean[c * S + s] = w.mean, pm2[c * S + s] = w.m2;
}

// The naive reference, x: (N, C, L) -> mean, var: (C): a block per channel, two float64 passes.
template <typename T>
__global__ void bn_stats_naive_kernel(const T* __restrict__ x, NormGeom g, acc_t<T>* mean,
                                      acc_t<T>* var) {
  __shared__ double shared_mean;
  int64_t c = blockIdx.x;
  double s = 0;
  for (int64_t j = threadIdx.x; j < g.M; j += blockDim.x)
    s += double(x[(j / g.L) * g.C * g.L + c * g.L + j % g.L]);
  s = block_sum(s);
  if (threadIdx.x == 0) shared_mean = s / double(g.M);
  __syncthreads();
  double m = shared_mean, ss = 0;
  for (int64_t j = threadIdx.x; j < g.M; j += blockDim.x) {
    double d = double(x[(j / g.L) * g.C * g.L + c * g.L + j % g.L]) - m;
    ss += d * d;
  }
  ss = block_sum(ss);
  if (threadIdx.x == 0) mean[c] = acc_t<T>(m), var[c] = acc_t<T>(ss / double(g.M));
}

// y = (x - mean[c]) * scale[c] + shift[c] (+ residual, when not null), then max(y, 0) with relu;
// V elements per thread per step over the whole tensor (Note [Vector walks]).
template <typename T, int V>
__global__ void bn_apply_kernel(const T* __restrict__ x, const T* __restrict__ residual,
                                T* __restrict__ y, const acc_t<T>* mean, const acc_t<T>* scale,
                                const acc_t<T>* shift, NormGeom g, bool relu) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const VT *xv = reinterpret_cast<const VT*>(x), *rv = reinterpret_cast<const VT*>(residual);
  VT* yv = reinterpret_cast<VT*>(y);
  for_each_channel_vector(g.N, g.C, g.L / V, [&](int64_t t, int64_t c) {
    const A m = mean[c], a = scale[c], b = shift[c];
    VT in = xv[t], out, res;
    if (rv) res = rv[t];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A v = bn_pre(A(in.v[j]), m, a, b);
      if (rv) v += A(res.v[j]);
      out.v[j] = T(relu && !(v > A(0)) ? A(0) : v);
    }
    yv[t] = out;
  });
}

// The forward's scale and shift again from the weight, bias and saved invstd (batch_norm_apply):
// the same formulas as bn_finalize_kernel's, so the same bits.
template <typename T>
__global__ void bn_coefficients_kernel(ChannelVec<T> w, ChannelVec<T> b,
                                       const acc_t<T>* __restrict__ invstd, int64_t C,
                                       acc_t<T>* __restrict__ scale, acc_t<T>* __restrict__ shift) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  scale[c] = bn_scale(w.get(c, 1.0), invstd[c]);
  shift[c] = acc_t<T>(b.get(c, 0.0));
}

// gy, x: (N, C, L) -> partial sums (C, S) of dy and dy * (x - mean), dy masked by the fused ReLU;
// read as vectors of V.
template <typename T, int V>
__global__ void bn_backward_partial_kernel(const T* __restrict__ gy, const T* __restrict__ x,
                                           ReluFromX<T> relu, NormGeom g, const acc_t<T>* mean,
                                           acc_t<T>* psdy, acc_t<T>* psdyx) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const int64_t c = blockIdx.y, s = blockIdx.x, S = gridDim.x, Lv = g.L / V, Mv = g.N * Lv;
  const int64_t chunk = (Mv + S - 1) / S, t0 = s * chunk, t1 = min(Mv, t0 + chunk);
  const VT *xv = reinterpret_cast<const VT*>(x), *gv = reinterpret_cast<const VT*>(gy);
  const A m = mean[c];
  const A ra = relu.on ? relu.scale(c) : A(0), rb = relu.on ? relu.shift(c) : A(0);
  A sdy = 0, sdyx = 0;
  for (Walk w(t0 + threadIdx.x, blockDim.x, Lv); w.t < t1;) {
    VT xs[kUnroll], gs[kUnroll];
    int got = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u, w.next(blockDim.x, Lv))
      if (w.t < t1) {  // the valid loads are a prefix: got counts them
        int64_t i = (w.a * g.C + c) * Lv + w.l;
        xs[u] = xv[i], gs[u] = gv[i];
        got = u + 1;
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (u < got)
#pragma unroll
        for (int j = 0; j < V; ++j) {
          A d = relu.on && !bn_relu_passes(xs[u].v[j], m, ra, rb) ? A(0) : A(gs[u].v[j]);
          sdy += d;
          sdyx += d * (A(xs[u].v[j]) - m);
        }
  }
  sdy = block_sum(sdy);
  sdyx = block_sum(sdyx);
  if (threadIdx.x == 0) psdy[c * S + s] = sdy, psdyx[c * S + s] = sdyx;
}

// dx = k[c] (dy - off[c] - (x - mean[c]) slope[c]), dy masked by the fused ReLU; walks the tensor
// as bn_apply_kernel does.
template <typename T, int V>
__global__ void bn_backward_apply_kernel(const T* __restrict__ gy, const T* __restrict__ x,
                                         ReluFromX<T> relu, T* __restrict__ gx,
                                         const acc_t<T>* mean, const acc_t<T>* k,
                                         const acc_t<T>* off, const acc_t<T>* slope, NormGeom g) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const VT *xv = reinterpret_cast<const VT*>(x), *gv = reinterpret_cast<const VT*>(gy);
  VT* ov = reinterpret_cast<VT*>(gx);
  for_each_channel_vector(g.N, g.C, g.L / V, [&](int64_t t, int64_t c) {
    const A m = mean[c], kc = k[c], oc = off[c], sc = slope[c];
    const A ra = relu.on ? relu.scale(c) : A(0), rb = relu.on ? relu.shift(c) : A(0);
    VT xs = xv[t], gs = gv[t], out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A d = relu.on && !bn_relu_passes(xs.v[j], m, ra, rb) ? A(0) : A(gs.v[j]);
      out.v[j] = T(kc * (d - oc - (A(xs.v[j]) - m) * sc));
    }
    ov[t] = out;
  });
}

DType acc_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// weight and bias: x's dtype, or float32 for a float16/bfloat16 x.
void check_channel_dtype(const char* op, const Tensor& x, const Tensor& t, const char* what) {
  if (!t.defined()) return;
  bool half = x.dtype() == DType::F16 || x.dtype() == DType::BF16;
  LOOM_CHECK(t.dtype() == x.dtype() || (half && t.dtype() == DType::F32), op, ": ", what, " ",
             describe(t), " must have the dtype of input ", describe(x),
             " (or float32 for a float16/bfloat16 input)");
}

// Blocks for a grid-stride pass over n vectors: enough to fill the device, at most 16 per SM.
unsigned walk_blocks(int64_t n, int device) {
  static_assert(kThreads == kBlockSize, "grid_for sizes blocks of kBlockSize threads");
  return unsigned(grid_for(n, device, 16));
}

// Blocks for the finalize kernels: a warp per channel.
unsigned channel_blocks(int64_t C) {
  return unsigned(std::clamp<int64_t>((C + kWarps - 1) / kWarps, 1, 1024));
}

// The split statistics pass (Note [Split Welford]): Welford partials (C, S) of x.
template <typename T>
NormPartials stats_partials(const Tensor& x, const NormGeom& g, cudaStream_t stream) {
  NormPartials p;
  p.S = splits_for(g, x.device().index);
  DType ad = acc_dtype(x.dtype());
  p.n = empty({g.C, p.S}, {.dtype = DType::I64, .device = x.device()});
  p.mean = empty({g.C, p.S}, {.dtype = ad, .device = x.device()});
  p.m2 = empty({g.C, p.S}, {.dtype = ad, .device = x.device()});
  with_vec_width<T>(vec_width_for<T>(g.L, {x.data_ptr()}), [&](auto V) {
    bn_stats_partial_kernel<T, V><<<dim3(unsigned(p.S), unsigned(g.C)), kThreads, 0, stream>>>(
        x.data<T>(), g, p.n.data<int64_t>(), static_cast<acc_t<T>*>(p.mean.data_ptr()),
        static_cast<acc_t<T>*>(p.m2.data_ptr()));
    LOOM_CUDA_CHECK_LAUNCH("bn_stats_partial_kernel");
  });
  return p;
}

void check_geometry(const char* op, const Tensor& x, const NormGeom& g) {
  LOOM_CHECK(x.dim() >= 2, op, ": expected an input (N, C, ...), got ", describe(x));
  LOOM_CHECK(g.C <= 65535, op, ": input ", x.shape(), " has ", g.C,
             " channels; the CUDA kernels handle at most 65535");
}

}  // namespace

int64_t bn_splits(int64_t C, int64_t M, int device) {
  int64_t want = (4 * int64_t(multiprocessor_count(device)) + C - 1) / std::max<int64_t>(C, 1);
  int64_t most = std::max<int64_t>(1, M / 2048);
  return std::clamp<int64_t>(std::min(want, most), 1, 1024);
}

template <typename T>
BnBackwardCoefficients bn_backward_finalize(const NormSums& sums, int64_t C, int64_t M,
                                            const Tensor& w, const Tensor& invstd, const Tensor& gw,
                                            const Tensor& gb, cudaStream_t stream) {
  using A = acc_t<T>;
  const Options acc{.dtype = invstd.dtype(), .device = invstd.device()};
  BnBackwardCoefficients o{empty({C}, acc), empty({C}, acc), empty({C}, acc)};
  bn_backward_finalize_kernel<T><<<channel_blocks(C), kThreads, 0, stream>>>(
      static_cast<A*>(sums.sdy.data_ptr()), static_cast<A*>(sums.sdyx.data_ptr()), sums.S, C, M,
      channel_vec<T>(w), static_cast<const A*>(invstd.data_ptr()), channel_vec<T>(gw),
      channel_vec<T>(gb), static_cast<A*>(o.k.data_ptr()), static_cast<A*>(o.off.data_ptr()),
      static_cast<A*>(o.slope.data_ptr()));
  LOOM_CUDA_CHECK_LAUNCH("bn_backward_finalize_kernel");
  return o;
}
#define LOOM_BN_BACKWARD_FINALIZE(T)                                                  \
  template BnBackwardCoefficients bn_backward_finalize<T>(                            \
      const NormSums&, int64_t, int64_t, const Tensor&, const Tensor&, const Tensor&, \
      const Tensor&, cudaStream_t);
LOOM_BN_BACKWARD_FINALIZE(float)
LOOM_BN_BACKWARD_FINALIZE(double)
LOOM_BN_BACKWARD_FINALIZE(Half)
LOOM_BN_BACKWARD_FINALIZE(BFloat16)
#undef LOOM_BN_BACKWARD_FINALIZE

std::pair<Tensor, Tensor> batch_norm_stats(const Tensor& x0, bool naive) {
  Tensor x = raw::contiguous(x0);
  NormGeom g = norm_geom(x);
  check_geometry("batch_norm_stats", x, g);
  LOOM_CHECK(g.M > 0, "batch_norm_stats: input ", x.shape(), " has no values per channel");
  int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  DType ad = acc_dtype(x.dtype());
  Tensor mean = empty({g.C}, {.dtype = ad, .device = x.device()});
  Tensor var = empty({g.C}, {.dtype = ad, .device = x.device()});
  if (g.C == 0) return {mean, var};
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_stats", [&] {
    using A = acc_t<scalar_t>;
    if (naive) {
      bn_stats_naive_kernel<scalar_t><<<unsigned(g.C), kThreads, 0, stream>>>(
          x.data<scalar_t>(), g, static_cast<A*>(mean.data_ptr()), static_cast<A*>(var.data_ptr()));
      LOOM_CUDA_CHECK_LAUNCH("bn_stats_naive_kernel");
      return;
    }
    NormPartials p = stats_partials<scalar_t>(x, g, stream);
    Tensor invstd = empty({g.C}, {.dtype = ad, .device = x.device()});
    Tensor scale = empty({g.C}, {.dtype = ad, .device = x.device()});
    Tensor shift = empty({g.C}, {.dtype = ad, .device = x.device()});
    bn_finalize_kernel<scalar_t, float><<<channel_blocks(g.C), kThreads, 0, stream>>>(
        p.n.data<int64_t>(), static_cast<A*>(p.mean.data_ptr()), static_cast<A*>(p.m2.data_ptr()),
        p.S, g.C, g.M, {}, {}, nullptr, nullptr, 0.0, 1.0, static_cast<A*>(mean.data_ptr()),
        static_cast<A*>(invstd.data_ptr()), static_cast<A*>(scale.data_ptr()),
        static_cast<A*>(shift.data_ptr()), static_cast<A*>(var.data_ptr()));
    LOOM_CUDA_CHECK_LAUNCH("bn_finalize_kernel");
  });
  return {mean, var};
}

BnCoefficients bn_coefficients(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Tensor& running_mean, const Tensor& running_var, bool training,
                               double momentum, double eps) {
  const Tensor w = contiguous_if_defined(weight), b = contiguous_if_defined(bias);
  const bool cl = raw::is_channels_last(x);
  NormGeom g = norm_geom(x);
  const bool batch_stats = training || !running_mean.defined();
  cudaStream_t stream = current_stream(x.device().index);
  DType ad = acc_dtype(x.dtype());
  check_channel_dtype("batch_norm", x, w, "weight");
  check_channel_dtype("batch_norm", x, b, "bias");
  // Running stats are updated in place, so they must be written where they live.
  LOOM_CHECK(!running_mean.defined() || running_mean.is_contiguous(), "batch_norm: running_mean ",
             describe(running_mean), " must be contiguous on CUDA");
  LOOM_CHECK(!running_var.defined() || running_var.is_contiguous(), "batch_norm: running_var ",
             describe(running_var), " must be contiguous on CUDA");
  BnCoefficients o;
  o.mean = empty({g.C}, {.dtype = ad, .device = x.device()});
  o.invstd = empty({g.C}, {.dtype = ad, .device = x.device()});
  o.scale = empty({g.C}, {.dtype = ad, .device = x.device()});
  o.shift = empty({g.C}, {.dtype = ad, .device = x.device()});
  if (g.C == 0 || (g.M == 0 && batch_stats)) return o;
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    NormPartials p;
    if (batch_stats) p = cl ? bn_stats_partials_cl(x, stream) : stats_partials<T>(x, g, stream);
    const ChannelVec<T> wp = channel_vec<T>(w), bp = channel_vec<T>(b);
    DType rdt = running_mean.defined() ? running_mean.dtype() : DType::F32;
    LOOM_CHECK(!running_var.defined() || running_var.dtype() == rdt, "batch_norm: running_mean ",
               describe(running_mean), " and running_var ", describe(running_var),
               " differ in dtype");
    bool update = training && running_mean.defined();
    LOOM_DISPATCH_FLOATING(rdt, "batch_norm", [&] {
      using R = scalar_t;
      R* rm = running_mean.defined() ? static_cast<R*>(running_mean.data_ptr()) : nullptr;
      R* rv = running_var.defined() ? static_cast<R*>(running_var.data_ptr()) : nullptr;
      bn_finalize_kernel<T, R><<<channel_blocks(g.C), kThreads, 0, stream>>>(
          batch_stats ? p.n.data<int64_t>() : nullptr,
          batch_stats ? static_cast<A*>(p.mean.data_ptr()) : nullptr,
          batch_stats ? static_cast<A*>(p.m2.data_ptr()) : nullptr, p.S, g.C, g.M, wp, bp,
          batch_stats && !update ? nullptr : rm, batch_stats && !update ? nullptr : rv, momentum,
          eps, static_cast<A*>(o.mean.data_ptr()), static_cast<A*>(o.invstd.data_ptr()),
          static_cast<A*>(o.scale.data_ptr()), static_cast<A*>(o.shift.data_ptr()), nullptr);
      LOOM_CUDA_CHECK_LAUNCH("bn_finalize_kernel");
    });
  });
  return o;
}

namespace {
// bn_apply_kernel's y in x's layout (contiguous or channels-last); `any`: false leaves y unwritten.
Tensor apply_coefficients(const Tensor& x, const Tensor& residual0, const Tensor& mean,
                          const Tensor& scale, const Tensor& shift, bool relu, bool any,
                          cudaStream_t stream) {
  const bool cl = raw::is_channels_last(x);
  Tensor y = cl ? raw::empty_channels_last(x.shape(), {.dtype = x.dtype(), .device = x.device()})
                : empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (!any) return y;
  Tensor residual = residual0;
  if (residual.defined()) residual = cl ? raw::channels_last(residual) : raw::contiguous(residual);
  if (cl) {
    bn_apply_cl(x, residual, y, mean, scale, shift, relu, stream);
    return y;
  }
  NormGeom g = norm_geom(x);
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* rp = data_or_null<T>(residual);
    with_vec_width<T>(vec_width_for<T>(g.L, {x.data_ptr(), rp, y.data_ptr()}), [&](auto V) {
      bn_apply_kernel<T, V><<<walk_blocks(x.numel() / V, x.device().index), kThreads, 0, stream>>>(
          x.data<T>(), rp, y.data<T>(), static_cast<const A*>(mean.data_ptr()),
          static_cast<const A*>(scale.data_ptr()), static_cast<const A*>(shift.data_ptr()), g,
          relu);
      LOOM_CUDA_CHECK_LAUNCH("bn_apply_kernel");
    });
  });
  return y;
}
}  // namespace

Tensor CudaBackend::batch_norm_apply(const Tensor& x0, const Tensor& weight0, const Tensor& bias0,
                                     const Tensor& save_mean, const Tensor& save_invstd,
                                     bool relu) {
  const bool cl = raw::is_channels_last(x0);  // kept (Note [Channels-last])
  Tensor x = cl ? x0 : raw::contiguous(x0);
  NormGeom g = norm_geom(x);
  check_geometry("batch_norm_apply", x, g);
  DeviceGuard guard(x.device().index);
  cudaStream_t stream = current_stream(x.device().index);
  Tensor w = contiguous_if_defined(weight0), b = contiguous_if_defined(bias0);
  check_channel_dtype("batch_norm_apply", x, w, "weight");
  check_channel_dtype("batch_norm_apply", x, b, "bias");
  DType ad = acc_dtype(x.dtype());
  LOOM_CHECK(save_mean.dtype() == ad && save_invstd.dtype() == ad && save_mean.numel() == g.C &&
                 save_invstd.numel() == g.C,
             "batch_norm_apply: save_mean ", describe(save_mean), " and save_invstd ",
             describe(save_invstd), " must be ", dtype_name(ad), " (", g.C, ") for input ",
             describe(x));
  Tensor scale = empty({g.C}, {.dtype = ad, .device = x.device()});
  Tensor shift = empty({g.C}, {.dtype = ad, .device = x.device()});
  if (g.C > 0) {
    LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_apply", [&] {
      using T = scalar_t;
      using A = acc_t<T>;
      bn_coefficients_kernel<T><<<unsigned((g.C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
          channel_vec<T>(w), channel_vec<T>(b), static_cast<const A*>(save_invstd.data_ptr()), g.C,
          static_cast<A*>(scale.data_ptr()), static_cast<A*>(shift.data_ptr()));
      LOOM_CUDA_CHECK_LAUNCH("bn_coefficients_kernel");
    });
  }
  return apply_coefficients(x, Tensor(), raw::contiguous(save_mean), scale, shift, relu,
                            g.C > 0 && g.M > 0 && x.numel() > 0, stream);
}

BatchNormOut CudaBackend::batch_norm(const Tensor& x0, const Tensor& weight0, const Tensor& bias0,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     bool training, double momentum, double eps, bool relu,
                                     const Tensor& residual) {
  const bool cl = raw::is_channels_last(x0);  // kept (Note [Channels-last])
  Tensor x = cl ? x0 : raw::contiguous(x0);
  NormGeom g = norm_geom(x);
  check_geometry("batch_norm", x, g);
  check_batch_norm_residual("batch_norm", x, residual);
  const bool batch_stats = training || !running_mean.defined();
  int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  BnCoefficients k =
      bn_coefficients(x, weight0, bias0, running_mean, running_var, training, momentum, eps);

  BatchNormOut out;
  const bool any = g.C > 0 && (g.M > 0 || !batch_stats) && x.numel() > 0;
  out.y = apply_coefficients(x, residual, k.mean, k.scale, k.shift, relu, any, stream);
  if (batch_stats) {
    out.save_mean = k.mean;
    out.save_invstd = k.invstd;
  }
  return out;
}

BatchNormGrads CudaBackend::batch_norm_backward(const Tensor& grad_y, const Tensor& x0,
                                                const Tensor& weight, const Tensor& bias,
                                                const Tensor& save_mean0,
                                                const Tensor& save_invstd0,
                                                const Tensor& relu_out) {
  const bool cl = raw::is_channels_last(x0);  // kept (Note [Channels-last])
  auto layout = [cl](const Tensor& t) { return cl ? raw::channels_last(t) : raw::contiguous(t); };
  Tensor x = layout(x0), gy = layout(raw::cast(grad_y, x0.dtype()));
  // NCHW recomputes the ReLU's mask from x (Note [ReLU mask from x]); channels-last reads it.
  const bool relu = relu_out.defined();
  Tensor ry = relu && cl ? layout(raw::cast(relu_out, x0.dtype())) : Tensor();
  NormGeom g = norm_geom(x);
  check_geometry("batch_norm_backward", x, g);
  int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  DType ad = acc_dtype(x.dtype());
  Tensor mean = raw::contiguous(raw::cast(save_mean0, ad)),
         invstd = raw::contiguous(raw::cast(save_invstd0, ad));
  Tensor w = contiguous_if_defined(weight), b = contiguous_if_defined(bias);
  check_channel_dtype("batch_norm_backward", x, w, "weight");
  check_channel_dtype("batch_norm_backward", x, b, "bias");

  BatchNormGrads out;
  out.grad_input =
      cl ? raw::empty_channels_last(x.shape(), {.dtype = x.dtype(), .device = x.device()})
         : empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  Tensor gw, gb;  // in weight's dtype
  if (w.defined()) {
    gw = empty({g.C}, {.dtype = w.dtype(), .device = x.device()});
    gb = empty({g.C}, {.dtype = w.dtype(), .device = x.device()});
  }
  if (g.C > 0 && g.M > 0) {
    NormSums sums;
    if (cl) {
      sums = bn_backward_partials_cl(gy, x, ry, mean, stream);
    } else {
      sums.S = splits_for(g, dev);
      sums.sdy = empty({g.C, sums.S}, {.dtype = ad, .device = x.device()});
      sums.sdyx = empty({g.C, sums.S}, {.dtype = ad, .device = x.device()});
    }
    const int64_t S = sums.S;
    LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
      using T = scalar_t;
      using A = acc_t<T>;
      const A* mp = static_cast<const A*>(mean.data_ptr());
      ReluFromX<T> rx{relu, channel_vec<T>(w), channel_vec<T>(b),
                      static_cast<const A*>(invstd.data_ptr())};
      const int width =
          vec_width_for<T>(g.L, {gy.data_ptr(), x.data_ptr(), out.grad_input.data_ptr()});
      if (!cl) {
        with_vec_width<T>(width, [&](auto V) {
          bn_backward_partial_kernel<T, V>
              <<<dim3(unsigned(S), unsigned(g.C)), kThreads, 0, stream>>>(
                  gy.data<T>(), x.data<T>(), rx, g, mp, static_cast<A*>(sums.sdy.data_ptr()),
                  static_cast<A*>(sums.sdyx.data_ptr()));
          LOOM_CUDA_CHECK_LAUNCH("bn_backward_partial_kernel");
        });
      }
      const BnBackwardCoefficients k =
          bn_backward_finalize<T>(sums, g.C, g.M, w, invstd, gw, gb, stream);
      if (cl) {
        bn_backward_apply_cl(gy, x, ry, out.grad_input, mean, k.k, k.off, k.slope, stream);
        return;
      }
      with_vec_width<T>(width, [&](auto V) {
        bn_backward_apply_kernel<T, V><<<walk_blocks(x.numel() / V, dev), kThreads, 0, stream>>>(
            gy.data<T>(), x.data<T>(), rx, out.grad_input.data<T>(), mp,
            static_cast<A*>(k.k.data_ptr()), static_cast<A*>(k.off.data_ptr()),
            static_cast<A*>(k.slope.data_ptr()), g);
        LOOM_CUDA_CHECK_LAUNCH("bn_backward_apply_kernel");
      });
    });
  } else if (w.defined() && g.C > 0) {
    fill_(gw, 0.0);
    fill_(gb, 0.0);
  }
  if (w.defined()) out.grad_weight = gw, out.grad_bias = gb;
  return out;
}

}  // namespace loom::cuda
