// The CUDA batch norm's passes over channels-last tensors (Note [Channels-last]): x (N, C, H, W)
// with NHWC strides is M = N*H*W rows of C channels, read in vectors of V channels (16 bytes).
// The two reductions (statistics; backward sums) write the same (C, S) partials as the NCHW
// passes of cuda_batch_norm.cu, which finalizes both layouts with the same kernels; the two
// elementwise passes (normalise; input gradient) write the input's layout. Leaves out: the naive
// reference (the tests compare these passes with the CPU backend and with the NCHW passes) and
// ranks other than 4.
#include <algorithm>

#include "core/cuda/check.h"
#include "core/dispatch.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm/cuda_batch_norm.h"
#include "kernels/cuda/norm/welford.cuh"
#include "kernels/cuda/vector_walk.cuh"
#include "kernels/functors.h"

namespace loom::cuda {

namespace {

// Note [Channels-last reductions]
// A block takes a tile of TC = min(Cv, 256) channel vectors (Cv = C / V; the tile is blockIdx.y)
// and R = 256 / TC rows at a time: thread (r, v) = (tid / TC, tid % TC) reads rows r, r + R, ...
// of its block's share of the M rows, so a warp reads whole rows, 16 contiguous bytes per thread.
// Each thread keeps V shifted sums (Note [Shifted sums]) with the same shift K for every thread
// and block (the channel's value in row 0), so the R threads of one vector add their sums in a
// tree through shared memory, and the first turns the block's sums into its Welford partial.
// S blocks split the rows (at most 256; the finalize kernels merge them a warp per channel).

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // rows in flight per thread

struct Tile {
  int TC, R;
};
Tile tile_for(int64_t Cv) {
  int TC = int(std::min<int64_t>(Cv, kThreads));
  return {TC, kThreads / TC};
}

// A thread's place in Note [Channels-last reductions]: R row threads per vector, its row r and
// vector v of the block's tile, its channel vector cv, and the rows [r0, r1) of block s of S.
struct ClPlace {
  int R, r, v;
  int64_t cv, S, s, r0, r1;
};
__device__ __forceinline__ ClPlace cl_place(int64_t M, int TC) {
  const int v = int(threadIdx.x) % TC;
  const int64_t S = gridDim.x, s = blockIdx.x, chunk = (M + S - 1) / S, r0 = s * chunk;
  return {int(blockDim.x) / TC, int(threadIdx.x) / TC, v, int64_t(blockIdx.y) * TC + v, S, s, r0,
          min(M, r0 + chunk)};
}

// The shared-memory tree of Note [Channels-last reductions]: the R row threads (r = 0 .. R-1) of
// each channel vector add their sums into row 0's, halving the rows each round; add(dst, src)
// adds thread src's entries into thread dst's. Every thread of the block calls it.
template <typename Add>
__device__ __forceinline__ void sum_rows_into_row0(int R, int r, int TC, Add add) {
  for (int w = R; w > 1;) {  // halve the rows, adding row r + h into row r
    const int h = (w + 1) / 2;
    if (r < w - h) add(int(threadIdx.x), int(threadIdx.x) + h * TC);
    w = h;
    __syncthreads();
  }
}

// x: (M, Cv) vectors -> Welford partials (C, S).
template <typename T, int V>
__global__ void bn_stats_partial_cl_kernel(const T* __restrict__ x, int64_t M, int64_t Cv, int TC,
                                           int64_t* __restrict__ pn, acc_t<T>* __restrict__ pmean,
                                           acc_t<T>* __restrict__ pm2) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  extern __shared__ __align__(16) unsigned char smem[];
  const auto [R, r, v, cv, S, s, r0, r1] = cl_place(M, TC);
  const VT* xv = reinterpret_cast<const VT*>(x);
  A K[V], s1[V], s2[V];
  int64_t count = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) K[j] = 0, s1[j] = 0, s2[j] = 0;
  if (r < R && cv < Cv) {
    const VT k0 = xv[cv];
#pragma unroll
    for (int j = 0; j < V; ++j) K[j] = A(k0.v[j]);
    for (int64_t row = r0 + r; row < r1; row += int64_t(R) * kUnroll) {
      VT in[kUnroll];
      int got = 0;  // the valid rows are a prefix
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (row + int64_t(u) * R < r1) in[u] = xv[(row + int64_t(u) * R) * Cv + cv], got = u + 1;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (u < got)
#pragma unroll
          for (int j = 0; j < V; ++j) {
            A d = A(in[u].v[j]) - K[j];
            s1[j] += d;
            s2[j] += d * d;
          }
      count += got;
    }
  }
  // Shared: count (blockDim), then s1 and s2 (blockDim x V each); every thread's shift is K.
  int64_t* sn = reinterpret_cast<int64_t*>(smem);
  A* ss1 = reinterpret_cast<A*>(sn + blockDim.x);
  A* ss2 = ss1 + blockDim.x * V;
  sn[threadIdx.x] = count;
#pragma unroll
  for (int j = 0; j < V; ++j) ss1[threadIdx.x * V + j] = s1[j], ss2[threadIdx.x * V + j] = s2[j];
  __syncthreads();
  sum_rows_into_row0(R, r, TC, [&](int dst, int src) {
    sn[dst] += sn[src];
    for (int j = 0; j < V; ++j)
      ss1[dst * V + j] += ss1[src * V + j], ss2[dst * V + j] += ss2[src * V + j];
  });
  if (r != 0 || cv >= Cv) return;
  for (int j = 0; j < V; ++j) {
    Welford<A> w = Welford<A>::from_shifted(sn[v], K[j], ss1[v * V + j], ss2[v * V + j]);
    const int64_t c = cv * V + j;
    pn[c * S + s] = w.n, pmean[c * S + s] = w.mean, pm2[c * S + s] = w.m2;
  }
}

// gy, x, relu_y: (M, Cv) vectors -> partial sums (C, S) of dy and dy (x - mean), dy masked by the
// fused ReLU's output (relu_y null: none).
template <typename T, int V>
__global__ void bn_backward_partial_cl_kernel(const T* __restrict__ gy, const T* __restrict__ x,
                                              const T* __restrict__ relu_y, int64_t M, int64_t Cv,
                                              int TC, const acc_t<T>* __restrict__ mean,
                                              acc_t<T>* __restrict__ psdy,
                                              acc_t<T>* __restrict__ psdyx) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  extern __shared__ __align__(16) unsigned char smem[];
  const auto [R, r, v, cv, S, s, r0, r1] = cl_place(M, TC);
  const VT *xv = reinterpret_cast<const VT*>(x), *gv = reinterpret_cast<const VT*>(gy),
           *yv = reinterpret_cast<const VT*>(relu_y);
  A m[V], sdy[V], sdyx[V];
#pragma unroll
  for (int j = 0; j < V; ++j) m[j] = 0, sdy[j] = 0, sdyx[j] = 0;
  if (r < R && cv < Cv) {
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = mean[cv * V + j];
    for (int64_t row = r0 + r; row < r1; row += int64_t(R) * kUnroll) {
      VT xs[kUnroll], gs[kUnroll], ys[kUnroll];
      int got = 0;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (row + int64_t(u) * R < r1) {
          int64_t i = (row + int64_t(u) * R) * Cv + cv;
          xs[u] = xv[i], gs[u] = gv[i];
          if (relu_y) ys[u] = yv[i];
          got = u + 1;
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (u < got)
#pragma unroll
          for (int j = 0; j < V; ++j) {
            A d = relu_y && !(A(ys[u].v[j]) > A(0)) ? A(0) : A(gs[u].v[j]);
            sdy[j] += d;
            sdyx[j] += d * (A(xs[u].v[j]) - m[j]);
          }
    }
  }
  A* sa = reinterpret_cast<A*>(smem);
  A* sb = sa + blockDim.x * V;
#pragma unroll
  for (int j = 0; j < V; ++j) sa[threadIdx.x * V + j] = sdy[j], sb[threadIdx.x * V + j] = sdyx[j];
  __syncthreads();
  sum_rows_into_row0(R, r, TC, [&](int dst, int src) {
    for (int j = 0; j < V; ++j)
      sa[dst * V + j] += sa[src * V + j], sb[dst * V + j] += sb[src * V + j];
  });
  if (r != 0 || cv >= Cv) return;
  for (int j = 0; j < V; ++j) {
    const int64_t c = cv * V + j;
    psdy[c * S + s] = sa[v * V + j], psdyx[c * S + s] = sb[v * V + j];
  }
}

// Loads the V per-channel coefficients of channel vector cv from each of the n arrays.
template <typename A, int V, int n>
__device__ void load_coeffs(A (&out)[n][V], const A* const (&arrays)[n], int64_t cv) {
#pragma unroll
  for (int a = 0; a < n; ++a)
#pragma unroll
    for (int j = 0; j < V; ++j) out[a][j] = arrays[a][cv * V + j];
}

// y = (x - mean[c]) scale[c] + shift[c], then max(y, 0) with relu. Vector t is (row, cv) =
// (t / Cv, t % Cv); a thread steps `step` vectors and carries cv (adding step % Cv, wrapping
// once), reloading the coefficients only when cv changes.
template <typename T, int V>
__global__ void bn_apply_cl_kernel(const T* __restrict__ x, const T* __restrict__ residual,
                                   T* __restrict__ y, const acc_t<T>* mean, const acc_t<T>* scale,
                                   const acc_t<T>* shift, int64_t total, int64_t Cv, bool relu) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x, dc = step % Cv;
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const VT *xv = reinterpret_cast<const VT*>(x), *rv = reinterpret_cast<const VT*>(residual);
  VT* yv = reinterpret_cast<VT*>(y);
  const A* const arrays[3] = {mean, scale, shift};
  A k[3][V];
  int64_t cv = t % Cv;
  load_coeffs<A, V, 3>(k, arrays, cv);
  for (; t < total; t += step) {
    VT in = xv[t], out, res;
    if (rv) res = rv[t];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A v = (A(in.v[j]) - k[0][j]) * k[1][j] + k[2][j];
      if (rv) v += A(res.v[j]);
      out.v[j] = T(relu && !(v > A(0)) ? A(0) : v);
    }
    yv[t] = out;
    if (dc != 0) {
      cv += dc;
      if (cv >= Cv) cv -= Cv;
      load_coeffs<A, V, 3>(k, arrays, cv);
    }
  }
}

// dx = k[c] (dy - off[c] - (x - mean[c]) slope[c]), dy masked by the fused ReLU's output; walks
// the vectors as bn_apply_cl_kernel does.
template <typename T, int V>
__global__ void bn_backward_apply_cl_kernel(const T* __restrict__ gy, const T* __restrict__ x,
                                            const T* __restrict__ relu_y, T* __restrict__ gx,
                                            const acc_t<T>* mean, const acc_t<T>* kk,
                                            const acc_t<T>* off, const acc_t<T>* slope,
                                            int64_t total, int64_t Cv) {
  using A = acc_t<T>;
  using VT = Vec<T, V>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x, dc = step % Cv;
  int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const VT *xv = reinterpret_cast<const VT*>(x), *gv = reinterpret_cast<const VT*>(gy),
           *yv = reinterpret_cast<const VT*>(relu_y);
  VT* ov = reinterpret_cast<VT*>(gx);
  const A* const arrays[4] = {mean, kk, off, slope};
  A k[4][V];
  int64_t cv = t % Cv;
  load_coeffs<A, V, 4>(k, arrays, cv);
  for (; t < total; t += step) {
    VT xs = xv[t], gs = gv[t], ys{}, out;
    if (relu_y) ys = yv[t];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A d = relu_y && !(A(ys.v[j]) > A(0)) ? A(0) : A(gs.v[j]);
      out.v[j] = T(k[1][j] * (d - k[2][j] - (A(xs.v[j]) - k[0][j]) * k[3][j]));
    }
    ov[t] = out;
    if (dc != 0) {
      cv += dc;
      if (cv >= Cv) cv -= Cv;
      load_coeffs<A, V, 4>(k, arrays, cv);
    }
  }
}

DType acc_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

template <typename A>
A* ptr(const Tensor& t) {
  return static_cast<A*>(t.data_ptr());
}

// The launch of a channels-last reduction: vector width, tile, splits.
struct ClLaunch {
  int64_t M, C, Cv, S, tiles;
  Tile tile;
};

template <typename T>
ClLaunch cl_launch(const Tensor& x, int V) {
  ClLaunch l{};
  l.C = x.size(1);
  l.M = l.C == 0 ? 0 : x.numel() / l.C;
  l.Cv = l.C / V;
  l.tile = tile_for(std::max<int64_t>(l.Cv, 1));
  l.tiles = (std::max<int64_t>(l.Cv, 1) + l.tile.TC - 1) / l.tile.TC;
  // About two blocks per multiprocessor, each thread at least 8 rows, at most 256 splits.
  int64_t want = (2 * int64_t(multiprocessor_count(x.device().index)) + l.tiles - 1) / l.tiles;
  int64_t most = std::max<int64_t>(1, l.M / (int64_t(l.tile.R) * 8));
  l.S = std::clamp<int64_t>(std::min(want, most), 1, 256);
  return l;
}

unsigned walk_blocks(int64_t n, int device) {
  static_assert(kThreads == kBlockSize, "grid_for sizes blocks of kBlockSize threads");
  return unsigned(grid_for(n, device, 16));
}

}  // namespace

NormPartials bn_stats_partials_cl(const Tensor& x, cudaStream_t stream) {
  NormPartials p;
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    with_vec_width<T>(vec_width_for<T>(x.size(1), {x.data_ptr()}), [&](auto V) {
      ClLaunch l = cl_launch<T>(x, V);
      p.S = l.S;
      DType ad = acc_dtype(x.dtype());
      p.n = empty({l.C, l.S}, {.dtype = DType::I64, .device = x.device()});
      p.mean = empty({l.C, l.S}, {.dtype = ad, .device = x.device()});
      p.m2 = empty({l.C, l.S}, {.dtype = ad, .device = x.device()});
      size_t shared = size_t(kThreads) * (sizeof(int64_t) + 2 * V * sizeof(A));
      bn_stats_partial_cl_kernel<T, V>
          <<<dim3(unsigned(l.S), unsigned(l.tiles)), kThreads, shared, stream>>>(
              x.data<T>(), l.M, l.Cv, l.tile.TC, p.n.data<int64_t>(), ptr<A>(p.mean), ptr<A>(p.m2));
      LOOM_CUDA_CHECK_LAUNCH("bn_stats_partial_cl_kernel");
    });
  });
  return p;
}

void bn_apply_cl(const Tensor& x, const Tensor& residual, const Tensor& y, const Tensor& mean,
                 const Tensor& scale, const Tensor& shift, bool relu, cudaStream_t stream) {
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* rp = data_or_null<T>(residual);
    with_vec_width<T>(vec_width_for<T>(x.size(1), {x.data_ptr(), rp, y.data_ptr()}), [&](auto V) {
      const int64_t total = x.numel() / V, Cv = x.size(1) / V;
      bn_apply_cl_kernel<T, V><<<walk_blocks(total, x.device().index), kThreads, 0, stream>>>(
          x.data<T>(), rp, y.data<T>(), ptr<A>(mean), ptr<A>(scale), ptr<A>(shift), total, Cv,
          relu);
      LOOM_CUDA_CHECK_LAUNCH("bn_apply_cl_kernel");
    });
  });
}

NormSums bn_backward_partials_cl(const Tensor& gy, const Tensor& x, const Tensor& relu_y,
                                 const Tensor& mean, cudaStream_t stream) {
  NormSums out;
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* ryp = data_or_null<T>(relu_y);
    with_vec_width<T>(vec_width_for<T>(x.size(1), {gy.data_ptr(), x.data_ptr(), ryp}), [&](auto V) {
      ClLaunch l = cl_launch<T>(x, V);
      out.S = l.S;
      DType ad = acc_dtype(x.dtype());
      out.sdy = empty({l.C, l.S}, {.dtype = ad, .device = x.device()});
      out.sdyx = empty({l.C, l.S}, {.dtype = ad, .device = x.device()});
      size_t shared = size_t(kThreads) * 2 * V * sizeof(A);
      bn_backward_partial_cl_kernel<T, V>
          <<<dim3(unsigned(l.S), unsigned(l.tiles)), kThreads, shared, stream>>>(
              gy.data<T>(), x.data<T>(), ryp, l.M, l.Cv, l.tile.TC, ptr<A>(mean), ptr<A>(out.sdy),
              ptr<A>(out.sdyx));
      LOOM_CUDA_CHECK_LAUNCH("bn_backward_partial_cl_kernel");
    });
  });
  return out;
}

void bn_backward_apply_cl(const Tensor& gy, const Tensor& x, const Tensor& relu_y, const Tensor& gx,
                          const Tensor& mean, const Tensor& k, const Tensor& off,
                          const Tensor& slope, cudaStream_t stream) {
  LOOM_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* ryp = data_or_null<T>(relu_y);
    const int width =
        vec_width_for<T>(x.size(1), {gy.data_ptr(), x.data_ptr(), ryp, gx.data_ptr()});
    with_vec_width<T>(width, [&](auto V) {
      const int64_t total = x.numel() / V, Cv = x.size(1) / V;
      bn_backward_apply_cl_kernel<T, V>
          <<<walk_blocks(total, x.device().index), kThreads, 0, stream>>>(
              gy.data<T>(), x.data<T>(), ryp, gx.data<T>(), ptr<A>(mean), ptr<A>(k), ptr<A>(off),
              ptr<A>(slope), total, Cv);
      LOOM_CUDA_CHECK_LAUNCH("bn_backward_apply_cl_kernel");
    });
  });
}

}  // namespace loom::cuda
