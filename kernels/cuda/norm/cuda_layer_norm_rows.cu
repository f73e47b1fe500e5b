// The layer norm's fast path on CUDA (see cuda_layer_norm_rows.h): float32 rows of at most 1024
// values, a multiple of 4, kept in registers and read and written 4 values at a time.
// Leaves out: float64 and float16 inputs, wider or odd rows (the general kernels of
// cuda_layer_norm.cu, which stay the reference these are tested against).
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/norm/cuda_layer_norm_rows.h"
#include "kernels/cuda/norm/row_vectors.cuh"

namespace loom::cuda {

namespace {

// Note [Layer norm, a row in registers]
// The general kernels (cuda_layer_norm.cu) give each row a warp that walks it one value per lane
// at a time, twice or three times (the second and third walks from L1), and the backward reads
// dy and x once more for the column sums of dy xhat and dy. With GPT-2's rows (768 float32
// values) they ran at about half the memory bandwidth: 0.046 ms a forward and 0.096 ms a backward
// (dx 0.071, column partials 0.025) on an H200 for 16384 rows. Here lane l of a row's warp keeps
// columns 4 (l + 32 i), i < V (V = 2, 4, 6 or 8: N <= 128 V), in registers:
//   forward   one 16-byte load per 4 values of x (and of the residual: their sum written once),
//             the mean and the squared deviations from the registers, y written once;
//   backward  dy and x read once, dx (and its 16-bit copy) written once, and each lane adds the
//             row's dy xhat and dy into per-column registers as it goes: a block's 8 warps take
//             its 64 rows (row lo + warp, + 8, ...), then add their column sums in shared memory
//             in warp order, and the block writes one partial row. layer_norm_param_finish_kernel
//             adds the blocks' partial rows in a fixed order, so the result is the same on every
//             run (Note [Layer norm column sums]).
// The values are the general kernels' to float32 rounding (the sums are taken in another order).
// Measured on an H200 in the gpt profile (16384 rows of 768, bfloat16 residual, y, dy and dx
// copy): forward 0.041 ms (0.046 before), backward 0.079 ms plus 0.007 for the finish kernel
// (0.071 + 0.025 + 0.003 before); 3.16 ms of layer norm a step instead of 3.57. The backward is
// bound by its 128 registers a thread (the column sums' 48 among them): 2 blocks per SM. Keeping
// dy in 16 bits and making xhat again from x in the second walk saves only 7 registers, and
// asking for 3 blocks per SM spills; per-warp column sums in shared memory instead of registers
// (48 KB a block at N = 768) is the untried next step.
constexpr int kWarps = 8;  // warps per block

// y = (x' - mean) rstd w + b for row blockIdx.x * 8 + warp, x' = x + residual (written to sum)
// when a residual is given, else x. R: the residual's type; Y: y's.
template <typename R, typename Y, int V>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    layer_norm_forward_rows_kernel(const float* __restrict__ x, const R* __restrict__ res,
                                   const float* __restrict__ w, const float* __restrict__ b,
                                   float* __restrict__ sum, Y* __restrict__ y,
                                   float* __restrict__ mean, float* __restrict__ rstd, int64_t M,
                                   int N, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= M) return;
  const int64_t base = row * N;
  float v[V][4];
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = 4 * (lane + kWarpSize * i);
    if (c >= N) continue;
    load4(x + base + c, v[i]);
    if (res) {
      float a[4];
      load4(res + base + c, a);
      for (int e = 0; e < 4; ++e) v[i][e] += a[e];
      store4(sum + base + c, v[i]);
    }
    s += (v[i][0] + v[i][1]) + (v[i][2] + v[i][3]);
  }
  const float mu = warp_reduce(s, Plus{}) / float(N);
  float q = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (4 * (lane + kWarpSize * i) >= N) continue;
    for (int e = 0; e < 4; ++e) q += (v[i][e] - mu) * (v[i][e] - mu);
  }
  const float rs = 1.0f / sqrtf(warp_reduce(q, Plus{}) / float(N) + eps);
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = 4 * (lane + kWarpSize * i);
    if (c >= N) continue;
    float wv[4], bv[4], o[4];
    load4_or(w, c, 1.0f, wv);
    load4_or(b, c, 0.0f, bv);
    for (int e = 0; e < 4; ++e) o[e] = (v[i][e] - mu) * rs * wv[e] + bv[e];
    store4(y + base + c, o);
  }
  if (lane == 0) mean[row] = mu, rstd[row] = rs;
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) (+ add), g = dy w, for the block's 64 rows (warp
// by warp); with pw, the block's column sums of dy xhat and dy into row blockIdx.x of pw and pb.
// Y: dy's type; L: the type of dx's 16-bit copy `low` (or null).
template <typename Y, typename L, int V>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    layer_norm_backward_rows_kernel(const Y* __restrict__ dy, const float* __restrict__ x,
                                    const float* __restrict__ w, const float* __restrict__ mean,
                                    const float* __restrict__ rstd, const float* __restrict__ add,
                                    float* __restrict__ dx, L* __restrict__ low,
                                    float* __restrict__ pw, float* __restrict__ pb, int64_t M,
                                    int N) {
  __shared__ float col_w[128 * V], col_b[128 * V];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t lo = int64_t(blockIdx.x) * kLayerNormRowsPerBlock;
  const int64_t hi = lo + kLayerNormRowsPerBlock < M ? lo + kLayerNormRowsPerBlock : M;
  float aw[V][4] = {}, ab[V][4] = {};  // this lane's columns' sums of dy xhat and dy
  for (int64_t row = lo + warp; row < hi; row += kWarps) {
    const int64_t base = row * N;
    const float mu = mean[row], rs = rstd[row];
    float d[V][4], xh[V][4];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = 4 * (lane + kWarpSize * i);
      if (c >= N) continue;
      float xv[4], wv[4];
      load4(dy + base + c, d[i]);
      load4(x + base + c, xv);
      load4_or(w, c, 1.0f, wv);
      for (int e = 0; e < 4; ++e) {
        xh[i][e] = (xv[e] - mu) * rs;
        const float g = d[i][e] * wv[e];
        sg += g;
        sgx += g * xh[i][e];
      }
    }
    sg = warp_reduce(sg, Plus{}) / float(N);
    sgx = warp_reduce(sgx, Plus{}) / float(N);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = 4 * (lane + kWarpSize * i);
      if (c >= N) continue;
      float wv[4], o[4], av[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      load4_or(w, c, 1.0f, wv);
      if (add) load4(add + base + c, av);
      for (int e = 0; e < 4; ++e) {
        o[e] = rs * (d[i][e] * wv[e] - sg - xh[i][e] * sgx) + av[e];
        aw[i][e] += d[i][e] * xh[i][e];
        ab[i][e] += d[i][e];
      }
      store4(dx + base + c, o);
      if (low) store4(low + base + c, o);
    }
  }
  if (!pw) return;                    // the same for the whole block
  for (int k = 0; k < kWarps; ++k) {  // the warps' column sums, added in warp order
    if (warp == k)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = 4 * (lane + kWarpSize * i);
        if (c >= N) continue;
        for (int e = 0; e < 4; ++e) {
          col_w[c + e] = k == 0 ? aw[i][e] : col_w[c + e] + aw[i][e];
          col_b[c + e] = k == 0 ? ab[i][e] : col_b[c + e] + ab[i][e];
        }
      }
    __syncthreads();
  }
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    pw[int64_t(blockIdx.x) * N + j] = col_w[j];
    pb[int64_t(blockIdx.x) * N + j] = col_b[j];
  }
}

// V for rows of N values (N <= 1024, a multiple of 4): the fewest of 2, 4, 6, 8 with 128 V >= N.
template <typename F>
void with_vecs(int64_t N, const F& f) {
  if (N <= 256) return f(std::integral_constant<int, 2>{});
  if (N <= 512) return f(std::integral_constant<int, 4>{});
  if (N <= 768) return f(std::integral_constant<int, 6>{});
  f(std::integral_constant<int, 8>{});
}

// f(tag) with tag float or BFloat16 for dtype d; false (f not called) for any other dtype.
template <typename F>
bool with_f32_or_bf16(DType d, const F& f) {
  if (d == DType::F32) return f(float{}), true;
  if (d == DType::BF16) return f(BFloat16{}), true;
  return false;
}

// Whether the fast path takes rows of x (M, N): float32, 0 < N <= 1024, N % 4 == 0, and every
// tensor's data aligned to 4 of its elements (so is every row, N being a multiple of 4).
bool takes(const Tensor& x, std::initializer_list<const Tensor*> others) {
  const int64_t N = x.size(1);
  if (x.dtype() != DType::F32 || N == 0 || N > 1024 || N % 4 != 0 || x.size(0) == 0) return false;
  if (!aligned_to(x.data_ptr(), 16)) return false;
  for (const Tensor* t : others)
    if (t->defined() && !aligned_to(t->data_ptr(), 4 * dtype_size(t->dtype()))) return false;
  return true;
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace

bool layer_norm_forward_rows(const Tensor& x, const Tensor& res, const Tensor& w, const Tensor& b,
                             double eps, LayerNormOut& out) {
  if (!takes(x, {&res, &w, &b, &out.y, &out.sum})) return false;
  const int64_t M = x.size(0), N = x.size(1);
  const int dev = x.device().index;
  bool launched = false;
  with_f32_or_bf16(res.defined() ? res.dtype() : DType::F32, [&](auto r) {
    using R = decltype(r);
    with_f32_or_bf16(out.y.dtype(), [&](auto yt) {
      using Y = decltype(yt);
      with_vecs(N, [&](auto v) {
        layer_norm_forward_rows_kernel<R, Y, decltype(v)::value>
            <<<unsigned((M + kWarps - 1) / kWarps), kWarps * kWarpSize, 0, current_stream(dev)>>>(
                x.data<float>(), ptr_or_null<const R>(res), ptr_or_null<const float>(w),
                ptr_or_null<const float>(b), ptr_or_null<float>(out.sum), out.y.data<Y>(),
                out.mean.data<float>(), out.rstd.data<float>(), M, int(N), float(eps));
      });
      launched = true;
    });
  });
  if (launched) LOOM_CUDA_CHECK_LAUNCH("layer_norm_forward_rows_kernel");
  return launched;
}

bool layer_norm_backward_rows(const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& mean, const Tensor& rstd, const Tensor& add,
                              LayerNormGrads& r, bool sums, Tensor& pw, Tensor& pb) {
  auto f32_or_bf16 = [](DType d) { return d == DType::F32 || d == DType::BF16; };
  if (!takes(x, {&dy, &w, &add, &r.grad_input, &r.grad_input_low}) || !f32_or_bf16(dy.dtype()) ||
      (r.grad_input_low.defined() && !f32_or_bf16(r.grad_input_low.dtype())))
    return false;
  const int64_t M = x.size(0), N = x.size(1);
  const int dev = x.device().index;
  const int64_t blocks = (M + kLayerNormRowsPerBlock - 1) / kLayerNormRowsPerBlock;
  if (sums) {
    pw = empty({blocks, N}, {.dtype = DType::F32, .device = x.device()});
    pb = empty({blocks, N}, {.dtype = DType::F32, .device = x.device()});
  }
  bool launched = false;
  with_f32_or_bf16(dy.dtype(), [&](auto yt) {
    using Y = decltype(yt);
    with_f32_or_bf16(
        r.grad_input_low.defined() ? r.grad_input_low.dtype() : DType::F32, [&](auto lt) {
          using L = decltype(lt);
          with_vecs(N, [&](auto v) {
            layer_norm_backward_rows_kernel<Y, L, decltype(v)::value>
                <<<unsigned(blocks), kWarps * kWarpSize, 0, current_stream(dev)>>>(
                    dy.data<Y>(), x.data<float>(), ptr_or_null<const float>(w), mean.data<float>(),
                    rstd.data<float>(), ptr_or_null<const float>(add), r.grad_input.data<float>(),
                    ptr_or_null<L>(r.grad_input_low), ptr_or_null<float>(pw),
                    ptr_or_null<float>(pb), M, int(N));
          });
          launched = true;
        });
  });
  if (launched) LOOM_CUDA_CHECK_LAUNCH("layer_norm_backward_rows_kernel");
  return launched;
}

}  // namespace loom::cuda
