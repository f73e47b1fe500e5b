// The CUDA batch norm's per-channel finalize kernels, for NCHW and channels-last alike
// (kernels/cuda/norm/cuda_batch_norm.cu launches them after either layout's partial passes): a warp
// per channel merges the S partials in float64 and writes the statistics, the affine coefficients
// and the running-stat update (forward), or the parameter gradients and the input-gradient
// coefficients (backward). ChannelVec is how they read float32 or same-dtype parameters.
// Leaves out: the passes over the activations (cuda_batch_norm.cu, cuda_batch_norm_cl.cu).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/functors.h"

namespace loom::cuda {

// Sums v over the warp; every lane gets the total.
__device__ inline double warp_sum(double v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Merges channel c's S partials in float64 -> mean, biased var, one warp per channel (the lanes
// take every 32nd partial): Chan et al.'s merge in two passes, n = sum n_s,
// mean = sum n_s mean_s / n, M2 = sum M2_s + n_s (mean_s - mean)^2, with no division per partial
// (the channels-last passes write up to 256 per channel). Every lane gets the result.
template <typename A>
__device__ void merge_partials(const int64_t* pn, const A* pmean, const A* pm2, int64_t c,
                               int64_t S, double& mean, double& var) {
  const int lane = threadIdx.x % 32;
  double n = 0, sum = 0;
  for (int64_t s = lane; s < S; s += 32) {
    double nb = double(pn[c * S + s]);
    if (nb == 0) continue;
    n += nb;
    sum += nb * double(pmean[c * S + s]);
  }
  n = warp_sum(n), sum = warp_sum(sum);
  double m = n > 0 ? sum / n : 0.0, m2 = 0;
  for (int64_t s = lane; s < S; s += 32) {
    double nb = double(pn[c * S + s]);
    if (nb == 0) continue;
    double d = double(pmean[c * S + s]) - m;
    m2 += double(pm2[c * S + s]) + nb * d * d;
  }
  m2 = warp_sum(m2);
  mean = m;
  var = n > 0 ? m2 / n : 0.0;
}

// The channels a finalize kernel's warps take: warp w of the grid takes channels w, w + warps, ...
#define LOOM_FOR_EACH_CHANNEL_WARP(c, C)                                           \
  for (int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; c < (C); \
       c += int64_t(gridDim.x) * blockDim.x / 32)

// A per-channel vector (weight, bias, or their gradients): x's dtype T, or float32 when x is
// float16/bfloat16 (autocast keeps the float32 parameters and the kernels read them directly, with
// no cast kernels around the layer), or absent (null).
template <typename T>
struct ChannelVec {
  void* p = nullptr;
  bool f32 = false;
  __device__ double get(int64_t c, double absent) const {
    if (!p) return absent;
    return f32 ? double(static_cast<const float*>(p)[c]) : double(acc_t<T>(static_cast<T*>(p)[c]));
  }
  __device__ void set(int64_t c, acc_t<T> v) const {
    if (f32)
      static_cast<float*>(p)[c] = float(v);
    else
      static_cast<T*>(p)[c] = T(v);
  }
};

// Note [ReLU mask from x]
// The fused BatchNorm + ReLU's backward zeroes dy where the forward's output was 0. Reading the
// saved output for that costs a pass over the activation in each of the backward's two passes
// (seven passes become five without it: gy and x read twice, gx written once). So on NCHW the
// backward recomputes each pre-activation from x exactly as the forward did: the same per-channel
// scale (bn_scale: the weight times the saved, already rounded invstd, rounded once) and shift,
// the same fma (bn_pre), the same rounding to T. The mask is then bit for bit the forward's
// y > 0, also where the pre-activation is a tiny positive number that T rounds to zero.
// (Channels-last still reads the output: its backward passes are per element across channels.)
template <typename A>
__device__ inline A bn_scale(double w, A invstd) {
  return A(w * double(invstd));
}
template <typename A>
__device__ inline A bn_pre(A x, A mean, A scale, A shift) {
  return fma(x - mean, scale, shift);
}
// The mask: the forward's output y = T(max(pre, 0)) is > 0.
template <typename T, typename A>
__device__ inline bool bn_relu_passes(T x, A mean, A scale, A shift) {
  return A(T(bn_pre(A(x), mean, scale, shift))) > A(0);
}

// The fused ReLU's mask for the NCHW backward, recomputed from x (Note [ReLU mask from x]):
// channel c's forward scale and shift from the weight, bias and saved invstd. on: the forward ran
// with the ReLU.
template <typename T>
struct ReluFromX {
  bool on = false;
  ChannelVec<T> w, b;
  const acc_t<T>* invstd = nullptr;
  __device__ acc_t<T> scale(int64_t c) const { return bn_scale(w.get(c, 1.0), invstd[c]); }
  __device__ acc_t<T> shift(int64_t c) const { return acc_t<T>(b.get(c, 0.0)); }
};

// The kernels' view of a weight, bias or gradient vector (undefined: absent).
template <typename T>
ChannelVec<T> channel_vec(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data_ptr(), t.dtype() == DType::F32 && sizeof(T) == 2};
}

// Per channel: statistics -> save_mean/save_invstd, the affine coefficients, and (optionally)
// the running-stat update. In eval (pn == nullptr) the running stats are the statistics.
// var_out (optional) receives the biased variance (for batch_norm_stats).
// running: R or null.
template <typename T, typename R>
__global__ void bn_finalize_kernel(const int64_t* pn, const acc_t<T>* pmean, const acc_t<T>* pm2,
                                   int64_t S, int64_t C, int64_t M, ChannelVec<T> w,
                                   ChannelVec<T> b, R* run_mean, R* run_var, double momentum,
                                   double eps, acc_t<T>* save_mean, acc_t<T>* save_invstd,
                                   acc_t<T>* scale, acc_t<T>* shift, acc_t<T>* var_out) {
  using A = acc_t<T>;
  const bool lead = threadIdx.x % 32 == 0;  // the lane that writes
  LOOM_FOR_EACH_CHANNEL_WARP(c, C) {
    double mean, var;
    if (pn) {
      merge_partials(pn, pmean, pm2, c, S, mean, var);
    } else {
      mean = run_mean ? double(acc_t<R>(run_mean[c])) : 0.0;
      var = run_var ? double(acc_t<R>(run_var[c])) : 1.0;
    }
    if (!lead) continue;
    double invstd = 1.0 / sqrt(var + eps);
    double wc = w.get(c, 1.0), bc = b.get(c, 0.0);
    save_mean[c] = A(mean);
    save_invstd[c] = A(invstd);
    if (var_out) var_out[c] = A(var);
    scale[c] = bn_scale(wc, A(invstd));  // from the saved invstd (Note [ReLU mask from x])
    shift[c] = A(bc);
    if (pn && run_mean) {
      run_mean[c] = R((1 - momentum) * double(acc_t<R>(run_mean[c])) + momentum * mean);
      if (run_var)
        run_var[c] = R((1 - momentum) * double(acc_t<R>(run_var[c])) +
                       momentum * var * double(M) / double(M - 1));
    }
  }
}

// Per channel: db = sum dy, dw = sum dy xhat, and the dx coefficients
// k = w invstd, off = db / M, slope = invstd^2 sum(dy (x - mean)) / M.
template <typename T>
__global__ void bn_backward_finalize_kernel(const acc_t<T>* psdy, const acc_t<T>* psdyx, int64_t S,
                                            int64_t C, int64_t M, ChannelVec<T> w,
                                            const acc_t<T>* invstd, ChannelVec<T> grad_w,
                                            ChannelVec<T> grad_b, acc_t<T>* k, acc_t<T>* off,
                                            acc_t<T>* slope) {
  using A = acc_t<T>;
  LOOM_FOR_EACH_CHANNEL_WARP(c, C) {
    double sdy = 0, sdyx = 0;
    for (int64_t s = threadIdx.x % 32; s < S; s += 32)
      sdy += double(psdy[c * S + s]), sdyx += double(psdyx[c * S + s]);
    sdy = warp_sum(sdy), sdyx = warp_sum(sdyx);
    if (threadIdx.x % 32 != 0) continue;
    double is = double(invstd[c]), wc = w.get(c, 1.0);
    if (grad_w.p) grad_w.set(c, A(sdyx * is)), grad_b.set(c, A(sdy));
    k[c] = A(wc * is);
    off[c] = A(sdy / double(M));
    slope[c] = A(is * is * sdyx / double(M));
  }
}

}  // namespace loom::cuda
