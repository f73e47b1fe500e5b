// The CUDA environment report (core/cuda/device_info.h). Compiled in every build: without the CUDA
// backend the report says so.
#include "core/cuda/device_info.h"

#include "core/cuda/available.h"
#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include <cuda_runtime.h>
#include <cudnn.h>
#ifdef LOOM_WITH_NCCL
#include <nccl.h>
#endif

#include "core/cuda/stream.h"
#endif

namespace loom::cuda {

CudaInfo cuda_info() {
  CudaInfo info;
#ifndef LOOM_WITH_CUDA
  info.error = "this build of loom has no CUDA support (configure with -DLOOM_CUDA=ON)";
  return info;
#else
  cudaRuntimeGetVersion(&info.runtime_version);
  if (cudaDriverGetVersion(&info.driver_version) != cudaSuccess) info.driver_version = 0;
  info.cudnn_version = int(cudnnGetVersion());
#ifdef LOOM_WITH_NCCL
  int v = 0;
  if (ncclGetVersion(&v) == ncclSuccess) info.nccl_version = v;
#endif
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    info.error = explain_no_device(int(err), info.driver_version, info.runtime_version);
    if (err != cudaSuccess)
      info.error += str(" [", cudaGetErrorName(err), ": ", cudaGetErrorString(err), "]");
    cudaGetLastError();
    n = 0;
  }
  info.device_count = n;
  for (int d = 0; d < n; ++d) {
    DeviceProperties p;
    p.index = d;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      p.name = prop.name;
      p.total_memory = prop.totalGlobalMem;
      p.major = prop.major;
      p.minor = prop.minor;
      p.multiprocessors = prop.multiProcessorCount;
    }
    DeviceGuard g(d);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) p.free_memory = free_b;
    cudaGetLastError();
    info.devices.push_back(p);
  }
  return info;
#endif
}

std::string cuda_version_string(int v) { return str(v / 1000, ".", (v % 1000) / 10); }

std::string cudnn_version_string(int v) {
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch.
  return str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

std::string nccl_version_string(int v) {
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return str(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

}  // namespace loom::cuda
