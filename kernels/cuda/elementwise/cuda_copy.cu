// CUDA copies (device<->device with dtype conversion and broadcasting, host<->device, across
// devices), fill_, arange_ and random_ (the CPU's Philox formulas, so a seed gives the same numbers
// on both backends). See Note [Host copies].
// Leaves out: asynchronous device-to-host copies (the host reads the result right away).
#include <cmath>

#include "core/cuda/allocator.h"
#include "core/cuda/device_error.h"
#include "core/cuda/host_allocator.h"
#include "core/dispatch.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/raw_ops.h"

namespace loom::cuda {

// Note [Host copies]
// Host to device: a contiguous source of the destination's dtype and shape goes straight to
// cudaMemcpyAsync on the destination's current stream. From pinned memory the call returns at
// once (the pinned block is kept from reuse until the copy is done, core/cuda/host_allocator.h);
// from pageable memory the stream is synchronised before returning, so the caller may free or
// change the host buffer. Any other source (strided, another dtype, broadcast) is first made
// contiguous on the host in its own dtype, uploaded, and converted/scattered by the device copy
// kernel, which moves the fewest bytes over PCIe/NVLink-C2C.
// Device to host: the source is made contiguous in the destination's dtype on the device, copied
// down, and the stream synchronised (then errors flagged by kernels are reported); a strided or
// broadcast destination is filled from that contiguous buffer by the CPU backend.
// During CUDA graph capture only the asynchronous path (pinned host to device) is allowed; the
// others would wait for the GPU and raise an error saying so (check_not_capturing).

namespace {

struct CastOp {
  template <typename T>
  LOOM_HOST_DEVICE T operator()(T v) const {
    return v;
  }
};

template <typename T>
struct FillOp {
  T v;
  LOOM_HOST_DEVICE T operator()() const { return v; }
};

// dst = src (broadcast, converted) with both on dst's device.
void device_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.is_contiguous() &&
      src.is_contiguous()) {
    if (dst.data_ptr() == src.data_ptr()) return;
    int dev = dst.device().index;
    DeviceGuard g(dev);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(),
                                    size_t(dst.numel()) * dst.element_size(),
                                    cudaMemcpyDeviceToDevice, current_stream(dev)));
    return;
  }
  LOOM_DISPATCH_ALL(dst.dtype(), "copy_", [&] {
    using dst_t = scalar_t;
    LOOM_DISPATCH_ALL(src.dtype(), "copy_",
                      [&] { elementwise<dst_t, scalar_t>(dst, CastOp{}, src); });
  });
}

// Host to device bytes (host: a contiguous CPU tensor of nbytes).
void upload(void* dst, const Tensor& host, size_t nbytes, int dev) {
  cudaStream_t s = current_stream(dev);
  bool pinned = is_pinned(host.storage()->ptr());
  if (!pinned) check_not_capturing(s, "copy_ from pageable host memory to the GPU");
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, host.data_ptr(), nbytes, cudaMemcpyHostToDevice, s));
  if (!pinned)
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  else if (!is_capturing(s))
    record_pinned_use(host.storage()->ptr(), s);  // (a graph reads it at each replay)
}

void host_to_device(const Tensor& dst, const Tensor& src) {
  int dev = dst.device().index;
  DeviceGuard g(dev);
  size_t nbytes = size_t(dst.numel()) * dst.element_size();
  if (src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() &&
      dst.is_contiguous()) {
    upload(dst.data_ptr(), src, nbytes, dev);
    return;
  }
  Tensor hs = raw::contiguous(src);  // the source's own elements, in its dtype
  Tensor ds = empty(hs.shape(), {.dtype = hs.dtype(), .device = dst.device()});
  upload(ds.data_ptr(), hs, size_t(hs.numel()) * hs.element_size(), dev);
  device_copy(dst, ds);
}

void device_to_host(const Tensor& dst, const Tensor& src) {
  int dev = src.device().index;
  DeviceGuard g(dev);
  cudaStream_t s = current_stream(dev);
  check_not_capturing(s, "copy_ from the GPU to the host");
  Tensor d = src;  // contiguous, in dst's dtype, on the device
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    d = empty(src.shape(), {.dtype = dst.dtype(), .device = src.device()});
    device_copy(d, src);
  }
  bool direct = dst.is_contiguous() && dst.shape() == src.shape();
  Tensor h = direct ? dst : empty(src.shape(), {.dtype = dst.dtype()});
  LOOM_CUDA_CHECK(cudaMemcpyAsync(h.data_ptr(), d.data_ptr(), size_t(d.numel()) * d.element_size(),
                                  cudaMemcpyDeviceToHost, s));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  check_device_errors(dev);
  if (!direct) backend_for(kCPU).copy_(dst, h);
}

// src on one GPU, dst on another: a contiguous buffer of dst's dtype and shape is built on the
// source device and copied peer to peer on the destination's stream, after the source's work.
void cross_device_copy(const Tensor& dst, const Tensor& src) {
  int sdev = src.device().index, ddev = dst.device().index;
  Tensor s = src.shape() == dst.shape() ? src : raw::expand(src, dst.shape());
  {
    DeviceGuard g(sdev);
    s = raw::contiguous(raw::cast(s, dst.dtype()));
  }
  DeviceGuard g(ddev);
  cudaStream_t dstream = current_stream(ddev);
  Event ready;
  {
    DeviceGuard gs(sdev);
    ready.record(current_stream(sdev));
  }
  ready.wait(dstream);
  Tensor d = dst.is_contiguous()
                 ? dst
                 : empty(dst.shape(), {.dtype = dst.dtype(), .device = dst.device()});
  LOOM_CUDA_CHECK(cudaMemcpyPeerAsync(d.data_ptr(), ddev, s.data_ptr(), sdev,
                                      size_t(d.numel()) * d.element_size(), dstream));
  record_stream(s, dstream);  // s is freed at once; keep its block until the copy is done
  if (!d.is_same(dst)) device_copy(dst, d);
}

}  // namespace

// dst: any shape/strides/dtype/device, src: broadcasts to dst (either side may be the CPU)
void CudaBackend::copy_(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  Device dd = dst.device(), sd = src.device();
  if (dd.is_cuda() && sd.is_cuda()) {
    if (dd == sd) return device_copy(dst, src);
    return cross_device_copy(dst, src);
  }
  if (dd.is_cuda()) return host_to_device(dst, src);
  LOOM_CHECK(sd.is_cuda(), "copy_: the CUDA backend was asked to copy between two CPU tensors (",
             describe(dst), " <- ", describe(src), ")");
  device_to_host(dst, src);
}

// t: any shape/strides -> every element = value (in t's dtype)
void CudaBackend::fill_(const Tensor& t, double value) {
  if (t.numel() == 0) return;
  if (value == 0.0 && !std::signbit(value) && t.is_contiguous()) {  // all-zero bits in every dtype
    int dev = t.device().index;
    DeviceGuard g(dev);
    LOOM_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, size_t(t.numel()) * t.element_size(),
                                    current_stream(dev)));
    return;
  }
  LOOM_DISPATCH_ALL(t.dtype(), "fill_", [&] {
    elementwise<scalar_t>(t, FillOp<scalar_t>{scalar_t(acc_t<scalar_t>(value))});
  });
}

namespace {

template <typename T>
__global__ void arange_kernel(T* p, int64_t n, double start, double step) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = T(acc_t<T>(__dadd_rn(start, __dmul_rn(double(i), step))));
}

// Note [Same numbers on both backends]
// Element i of a draw is a pure function of (seed, offset, i) (core/philox.h), evaluated in
// double exactly as CpuBackend::random_ does: uniform a + (b - a) * u with the multiply and add
// rounded separately (__dmul_rn/__dadd_rn forbid the fused multiply-add the CPU build does not
// use there), normal a + b * n as one fused multiply-add (the CPU build contracts that one; with
// the default a = 0, b = 1 both roundings agree anyway), integers a + floor(u * (b - a)). Uniform
// and integer draws are therefore bit-identical across backends; normals go through log and cos,
// whose last bit may differ between libm and CUDA's, so float64 normals agree to about 1e-15
// relative and float32 ones (rounded from them) almost always exactly.
template <typename T>
__global__ void random_kernel(T* p, int64_t n, RandomKind kind, double a, double b, uint64_t seed,
                              uint64_t offset, bool f64) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    double v;
    if (kind == RandomKind::Uniform) {
      v = __dadd_rn(a, __dmul_rn(b - a, philox_uniform(seed, offset, uint64_t(i), f64)));
    } else if (kind == RandomKind::Normal) {
      v = fma(b, philox_normal(seed, offset, uint64_t(i)), a);
    } else {
      v = __dadd_rn(a, floor(__dmul_rn(philox_uniform(seed, offset, uint64_t(i), true), b - a)));
    }
    p[i] = T(acc_t<T>(v));
  }
}

}  // namespace

// t: contiguous 1-d -> t[i] = start + i * step
void CudaBackend::arange_(const Tensor& t, double start, double step) {
  int64_t n = t.numel();
  if (n == 0) return;
  int dev = t.device().index;
  DeviceGuard g(dev);
  LOOM_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    arange_kernel<scalar_t><<<grid_for(n, dev), kBlockSize, 0, current_stream(dev)>>>(
        t.data<scalar_t>(), n, start, step);
  });
  LOOM_CUDA_CHECK_LAUNCH("arange_kernel");
}

// t: contiguous -> Philox draws with counters [offset, offset + numel)
void CudaBackend::random_(const Tensor& t, RandomKind kind, double a, double b, uint64_t seed,
                          uint64_t offset) {
  int64_t n = t.numel();
  if (n == 0) return;
  LOOM_CHECK(t.is_contiguous(), "random_: expected a contiguous tensor, got ", describe(t));
  int dev = t.device().index;
  DeviceGuard g(dev);
  bool f64 = t.dtype() == DType::F64 || kind == RandomKind::Int;
  LOOM_DISPATCH_NUMERIC(t.dtype(), "random_", [&] {
    random_kernel<scalar_t><<<grid_for(n, dev), kBlockSize, 0, current_stream(dev)>>>(
        t.data<scalar_t>(), n, kind, a, b, seed, offset, f64);
  });
  LOOM_CUDA_CHECK_LAUNCH("random_kernel");
}

}  // namespace loom::cuda
