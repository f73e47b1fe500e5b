// The RMS norm's fast path on CUDA (see cuda_rms_norm_rows.h): rows of at most 8192 values, a
// multiple of 4, kept in registers and read and written 4 values at a time.
// Leaves out: float64, wider or odd rows and misaligned data (the general kernels of
// cuda_rms_norm.cu, which stay the reference these are tested against).
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/norm/cuda_rms_norm_rows.h"
#include "kernels/cuda/norm/row_vectors.cuh"

namespace loom::cuda {

namespace {

// Note [RMS norm, a row in registers]
// Llama's rows are wider than GPT-2's: C = 2048 (1B), 3072 (3B), 4096 (8B). As the layer norm's
// fast path (Note [Layer norm, a row in registers] in cuda_layer_norm_rows.cu) each row is read
// once and written once: thread l of a row's group of `tpr` threads keeps columns
// 4 (l + tpr i), i < V, in registers, V in {1, 2, 4, 8} (N <= 4 tpr V):
//   N <= 1024   tpr = 32: a warp per row, 8 rows per block, the row's sums by warp shuffles;
//   N <= 8192   tpr = 256: the whole block per row, the sums through 8 values of shared memory
//               (every thread adds them in warp order, so all get the same value);
//   forward     x read once, rstd = 1 / sqrt(mean(x^2) + eps) from the registers, y written once;
//   backward    dy and x read once, dx written once, and each thread adds its columns' dy *
//               round_x(x rstd) into registers over the block's rows (64 rows per block for a
//               warp per row, 16 for a block per row); a block's row groups add theirs in shared
//               memory in group order and the block writes one partial row, which
//               rms_norm_weight_finish (cuda_rms_norm.cu) adds in a fixed order: deterministic.
// Everything is float32 inside; x, the weight, y, dy and dx keep their dtypes (16-bit reads and
// writes are 8 bytes per 4 values). The values are the general kernels' to float32 rounding.
constexpr int kThreads = 256;

// v rounded to x's type X and back (the normalised row as Hugging Face rounds it).
template <typename X>
__device__ __forceinline__ float round_to(float v) {
  return float(X(v));
}

// The sum of v over the tpr threads of this thread's row group, in every thread of it: a warp's
// shuffles, or (tpr = kThreads) the block's warps added in order through `scratch`.
__device__ __forceinline__ float group_sum(float v, int tpr, float* scratch) {
  v = warp_reduce(v, Plus{});
  if (tpr == kWarpSize) return v;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();  // `scratch` may still be read by the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kThreads / kWarpSize; ++k) s += scratch[k];
  return s;
}

// y = w * round_x(x rstd) for row blockIdx.x * (kThreads / tpr) + group. X: x's type; W: the
// weight's and y's.
template <typename X, typename W, int V>
__global__ void __launch_bounds__(kThreads)
    rms_norm_forward_rows_kernel(const X* __restrict__ x, const W* __restrict__ w,
                                 W* __restrict__ y, float* __restrict__ rstd, int64_t M, int N,
                                 int tpr, float eps) {
  __shared__ float scratch[kThreads / kWarpSize];
  const int group = threadIdx.x / tpr, lane = threadIdx.x % tpr;
  const int64_t row = int64_t(blockIdx.x) * (kThreads / tpr) + group;
  if (row >= M) return;  // a whole warp (tpr 32) or the whole block (tpr = kThreads)
  const int64_t base = row * N;
  float v[V][4];
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = 4 * (lane + tpr * i);
    if (c >= N) continue;
    load4(x + base + c, v[i]);
    for (int e = 0; e < 4; ++e) q += v[i][e] * v[i][e];
  }
  const float rs = 1.0f / sqrtf(group_sum(q, tpr, scratch) / float(N) + eps);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = 4 * (lane + tpr * i);
    if (c >= N) continue;
    float wv[4], o[4];
    load4_or(w, c, 1.0f, wv);
    for (int e = 0; e < 4; ++e) o[e] = wv[e] * round_to<X>(v[i][e] * rs);
    store4(y + base + c, o);
  }
  if (lane == 0) rstd[row] = rs;
}

// The block's column sums `acc` of its row groups into row blockIdx.x of part: as they are with
// one group (a block per row), else added in group order through `col` (N floats of shared
// memory).
template <int V>
__device__ void write_partial_row(const float (&acc)[V][4], float* col, float* part, int N,
                                  int tpr) {
  const int groups = kThreads / tpr, group = threadIdx.x / tpr, lane = threadIdx.x % tpr;
  float* out = part + int64_t(blockIdx.x) * N;
  if (groups == 1) {
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (4 * (lane + tpr * i) < N) store4(out + 4 * (lane + tpr * i), acc[i]);
    return;
  }
  for (int k = 0; k < groups; ++k) {
    if (group == k)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = 4 * (lane + tpr * i);
        if (c >= N) continue;
        for (int e = 0; e < 4; ++e) col[c + e] = k == 0 ? acc[i][e] : col[c + e] + acc[i][e];
      }
    __syncthreads();
  }
  for (int j = threadIdx.x; j < N; j += kThreads) out[j] = col[j];
}

// dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd, for the block's `chunk` rows (row
// group by row group); with part, the block's column sums of dy round_x(xhat).
template <typename X, typename W, int V>
__global__ void __launch_bounds__(kThreads)
    rms_norm_backward_rows_kernel(const W* __restrict__ dy, const X* __restrict__ x,
                                  const W* __restrict__ w, const float* __restrict__ rstd,
                                  X* __restrict__ dx, float* __restrict__ part, int64_t M, int N,
                                  int tpr, int64_t chunk) {
  extern __shared__ float col[];  // N values: the column sums of the row groups
  __shared__ float scratch[kThreads / kWarpSize];
  const int groups = kThreads / tpr, lane = threadIdx.x % tpr;
  const int64_t lo = int64_t(blockIdx.x) * chunk, hi = lo + chunk < M ? lo + chunk : M;
  float acc[V][4] = {};
  for (int64_t row = lo + threadIdx.x / tpr; row < hi; row += groups) {
    const int64_t base = row * N;
    const float rs = rstd[row];
    float d[V][4], xh[V][4];  // the weight is read again (from L1) rather than kept
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = 4 * (lane + tpr * i);
      if (c >= N) continue;
      float wv[4];
      load4(dy + base + c, d[i]);
      load4(x + base + c, xh[i]);
      load4_or(w, c, 1.0f, wv);
      for (int e = 0; e < 4; ++e) s += d[i][e] * wv[e] * (xh[i][e] *= rs);
    }
    s = group_sum(s, tpr, scratch) / float(N);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = 4 * (lane + tpr * i);
      if (c >= N) continue;
      float o[4], wv[4];
      load4_or(w, c, 1.0f, wv);
      for (int e = 0; e < 4; ++e) {
        o[e] = rs * (d[i][e] * wv[e] - xh[i][e] * s);
        acc[i][e] += d[i][e] * round_to<X>(xh[i][e]);
      }
      store4(dx + base + c, o);
    }
  }
  if (part) write_partial_row<V>(acc, col, part, N, tpr);  // the same for the whole block
}

// (tpr, V) for rows of N values: a warp per row up to 1024, else the block; V the fewest of 1,
// 2, 4, 8 with 4 tpr V >= N.
struct RowsLayout {
  int tpr, vecs;
  int64_t chunk;  // the backward's rows per block
};
RowsLayout layout_for(int64_t N) {
  const int tpr = N <= 4 * kWarpSize * 8 ? kWarpSize : kThreads;
  const int64_t per = 4 * int64_t(tpr);
  const int vecs = N <= per ? 1 : N <= 2 * per ? 2 : N <= 4 * per ? 4 : 8;
  return {tpr, vecs, tpr == kWarpSize ? 64 : 16};
}

template <typename F>
void with_vecs(int vecs, const F& f) {
  if (vecs == 1) return f(std::integral_constant<int, 1>{});
  if (vecs == 2) return f(std::integral_constant<int, 2>{});
  if (vecs == 4) return f(std::integral_constant<int, 4>{});
  f(std::integral_constant<int, 8>{});
}

// f(X{}, W{}) for x's and the weight's dtypes (the weight's is x's or float32); false (f not
// called) for float64 x.
template <typename F>
bool with_types(DType x, DType w, const F& f) {
  if (x == DType::F32) return f(float{}, float{}), true;
  if (x == DType::BF16)
    return w == DType::F32 ? f(BFloat16{}, float{}) : f(BFloat16{}, BFloat16{}), true;
  if (x == DType::F16) return w == DType::F32 ? f(Half{}, float{}) : f(Half{}, Half{}), true;
  return false;
}

// Whether the fast path takes rows of x (M, N): not float64, 0 < N <= 8192, N % 4 == 0, M > 0,
// and every tensor's data aligned to 4 of its elements (so is every row, N being a multiple of 4).
bool takes(const Tensor& x, std::initializer_list<const Tensor*> others) {
  const int64_t N = x.size(1);
  if (x.dtype() == DType::F64 || N == 0 || N > 8192 || N % 4 != 0 || x.size(0) == 0) return false;
  if (!aligned_to(x.data_ptr(), 4 * x.element_size())) return false;
  for (const Tensor* t : others)
    if (t->defined() && !aligned_to(t->data_ptr(), 4 * t->element_size())) return false;
  return true;
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace

bool rms_norm_forward_rows(const Tensor& x, const Tensor& w, double eps, RmsNormOut& out) {
  if (!takes(x, {&w, &out.y})) return false;
  const int64_t M = x.size(0), N = x.size(1);
  const RowsLayout L = layout_for(N);
  const int dev = x.device().index;
  const auto blocks = unsigned((M + kThreads / L.tpr - 1) / (kThreads / L.tpr));
  const bool launched = with_types(x.dtype(), out.y.dtype(), [&](auto xt, auto wt) {
    using X = decltype(xt);
    using W = decltype(wt);
    with_vecs(L.vecs, [&](auto v) {
      rms_norm_forward_rows_kernel<X, W, decltype(v)::value>
          <<<blocks, kThreads, 0, current_stream(dev)>>>(x.data<X>(), ptr_or_null<const W>(w),
                                                         out.y.data<W>(), out.rstd.data<float>(), M,
                                                         int(N), L.tpr, float(eps));
    });
  });
  if (launched) LOOM_CUDA_CHECK_LAUNCH("rms_norm_forward_rows_kernel");
  return launched;
}

bool rms_norm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                            RmsNormGrads& r, bool sums, Tensor& partials) {
  if (!takes(x, {&dy, &w, &r.grad_input})) return false;
  const int64_t M = x.size(0), N = x.size(1);
  const RowsLayout L = layout_for(N);
  const int dev = x.device().index;
  const int64_t blocks = (M + L.chunk - 1) / L.chunk;
  if (sums) partials = empty({blocks, N}, {.dtype = DType::F32, .device = x.device()});
  const size_t shared = sums && L.tpr == kWarpSize ? size_t(N) * sizeof(float) : 0;
  const bool launched = with_types(x.dtype(), dy.dtype(), [&](auto xt, auto wt) {
    using X = decltype(xt);
    using W = decltype(wt);
    with_vecs(L.vecs, [&](auto v) {
      rms_norm_backward_rows_kernel<X, W, decltype(v)::value>
          <<<unsigned(blocks), kThreads, shared, current_stream(dev)>>>(
              dy.data<W>(), x.data<X>(), ptr_or_null<const W>(w), rstd.data<float>(),
              r.grad_input.data<X>(), ptr_or_null<float>(partials), M, int(N), L.tpr, L.chunk);
    });
  });
  if (launched) LOOM_CUDA_CHECK_LAUNCH("rms_norm_backward_rows_kernel");
  return launched;
}

}  // namespace loom::cuda
