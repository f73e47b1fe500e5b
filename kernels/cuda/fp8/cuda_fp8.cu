// CUDA FP8 quantisation (the FP8 section of kernels/backend_methods.inc): amax as a grid-stride
// block reduction with one atomic per block, then the cast kernel, which reads amax from the
// device, computes the scale there (fp8_scale, the CPU's float32 division), and writes the codes
// with CUDA's saturating round-to-nearest-even FP8 conversion (__NV_SATFINITE), in rows, in
// their transpose, or both from one read of x (32 x 32 tiles through shared memory, so both
// writes are coalesced). The naive cast kernel (one thread per element) stays beside it; tests
// compare both with the CPU's reference codes bit for bit. Nothing is read back to the host.
// Leaves out: the product (kernels/cuda/matmul/cuda_fp8_mm.cpp), delayed scaling (amax history).
#include <cuda_fp8.h>

#include <algorithm>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dispatch.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"

namespace loom::cuda {

namespace {

struct MaxOf {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// *out = max(*out, max |x|) over x (n). *out starts at 0; non-negative floats order as their
// bits do, so the unsigned atomicMax is the float max.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
    amax_kernel(const T* __restrict__ x, int64_t n, float* out) {
  float m = 0.0f;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    m = fmaxf(m, fabsf(float(x[i])));
  m = block_reduce(m, MaxOf{}, 0.0f);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(out), __float_as_uint(m));
}

__device__ __forceinline__ uint8_t encode(float v, Fp8Format f) {
  return uint8_t(
      __nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2));
}

// What the cast kernels share: the scale from amax, written out once (by thread 0 of block 0).
struct CastArgs {
  const float* amax;
  float* scale;
  float* inv_scale;
  uint8_t* rows;        // (R, C) or null
  uint8_t* transposed;  // (C, R) or null
  int64_t R, C;
  float fmt_max;
  Fp8Format format;
};

__device__ __forceinline__ float scale_of(const CastArgs& a) {
  const float s = fp8_scale(*a.amax, a.fmt_max);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    *a.scale = s;
    *a.inv_scale = 1.0f / s;
  }
  return s;
}

// The naive version: thread i quantises element i = (r, c) into both layouts.
template <typename T>
__global__ void cast_naive_kernel(const T* __restrict__ x, CastArgs a) {
  const float s = scale_of(a);
  const int64_t n = a.R * a.C, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint8_t q = encode(float(x[i]) * s, a.format);
    if (a.rows) a.rows[i] = q;
    if (a.transposed) a.transposed[(i % a.C) * a.R + i / a.C] = q;
  }
}

constexpr int kTile = 32, kTileRows = 8;  // a 32 x 32 tile, 32 x 8 threads, 4 rows each

// Block (bx, by) quantises the tile of rows by * 32.., columns bx * 32..: each thread reads and
// writes 4 values of a column of the tile (coalesced along rows of x), and, through shared memory,
// 4 values of the transposed tile (coalesced along rows of the transpose).
template <typename T>
__global__ void __launch_bounds__(kTile* kTileRows)
    cast_tiled_kernel(const T* __restrict__ x, CastArgs a) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float s = scale_of(a);
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int j = ty; j < kTile; j += kTileRows) {
    const int64_t r = r0 + j, c = c0 + tx;
    if (r < a.R && c < a.C) {
      const uint8_t q = encode(float(x[r * a.C + c]) * s, a.format);
      if (a.rows) a.rows[r * a.C + c] = q;
      tile[j][tx] = q;
    }
  }
  if (!a.transposed) return;
  __syncthreads();
#pragma unroll
  for (int j = ty; j < kTile; j += kTileRows) {
    const int64_t c = c0 + j, r = r0 + tx;  // row c of the transpose, column r
    if (r < a.R && c < a.C) a.transposed[c * a.R + r] = tile[tx][j];
  }
}

Tensor zero_scalar(const Device& d) {
  Tensor t = empty({}, {.dtype = DType::F32, .device = d});
  LOOM_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, sizeof(float), current_stream(d.index)));
  return t;
}

}  // namespace

// x (R, C) -> 0-d float32 max |x|
Tensor CudaBackend::fp8_amax(const Tensor& x) {
  check_fp8_input("fp8_amax", x);
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  Tensor out = zero_scalar(x.device());
  if (x.numel() == 0) return out;
  LOOM_DISPATCH_FLOATING(x.dtype(), "fp8_amax", [&] {
    amax_kernel<scalar_t>
        <<<unsigned(grid_for(x.numel(), dev)), kBlockSize, 0, current_stream(dev)>>>(
            x.data<scalar_t>(), x.numel(), out.data<float>());
    LOOM_CUDA_CHECK_LAUNCH("fp8_amax");
  });
  return out;
}

// x (R, C) -> bits (R, C) and/or bits_t (C, R), codes of x * scale
Fp8Tensor CudaBackend::fp8_quantize(const Tensor& x, Fp8Format format, Fp8Layouts layouts) {
  check_fp8_input("fp8_quantize", x);
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const int64_t R = x.size(0), C = x.size(1);
  const Options u8{.dtype = DType::U8, .device = x.device()};
  const Options f32{.dtype = DType::F32, .device = x.device()};
  Fp8Tensor out;
  out.format = format;
  out.amax = fp8_amax(x);
  out.scale = empty({}, f32);
  out.inv_scale = empty({}, f32);
  if (layouts.rows) out.bits = empty({R, C}, u8);
  if (layouts.transposed) out.bits_t = empty({C, R}, u8);
  CastArgs a{out.amax.data<float>(),
             out.scale.data<float>(),
             out.inv_scale.data<float>(),
             layouts.rows ? out.bits.data<uint8_t>() : nullptr,
             layouts.transposed ? out.bits_t.data<uint8_t>() : nullptr,
             R,
             C,
             float(fp8_max(format)),
             format};
  cudaStream_t s = current_stream(dev);
  LOOM_DISPATCH_FLOATING(x.dtype(), "fp8_quantize", [&] {
    if (use_naive_kernels() || R * C == 0 || (R + kTile - 1) / kTile > 65535) {
      cast_naive_kernel<scalar_t>
          <<<unsigned(grid_for(std::max<int64_t>(R * C, 1), dev)), kBlockSize, 0, s>>>(
              x.data<scalar_t>(), a);
    } else {
      dim3 grid(unsigned((C + kTile - 1) / kTile), unsigned((R + kTile - 1) / kTile));
      cast_tiled_kernel<scalar_t><<<grid, dim3(kTile, kTileRows), 0, s>>>(x.data<scalar_t>(), a);
    }
    LOOM_CUDA_CHECK_LAUNCH("fp8_quantize");
  });
  return out;
}

}  // namespace loom::cuda
