// Device count in every build (core/cuda/available.h), and the answers of a build without CUDA
// to the calls that need a device. Compiled in every build, like device_info.cpp.
#include "core/cuda/available.h"

#include <algorithm>

#include "core/error.h"

#ifdef LOOM_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#endif

namespace loom::cuda {

bool compiled_with_cuda() {
#ifdef LOOM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int device_count() {
#ifdef LOOM_WITH_CUDA
  static const int n = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error here
      c = 0;
    }
    return std::min(c, kMaxCudaDevices);
  }();
  return n;
#else
  return 0;
#endif
}

bool is_available() { return device_count() > 0; }

#ifndef LOOM_WITH_CUDA
// Without the CUDA backend there is no device to synchronise or to ask for memory statistics.
void synchronize(int device) {
  LOOM_FAIL("cuda::synchronize(", device, "): this build of loom has no CUDA support");
}
MemoryStats memory_stats(int device) {
  LOOM_FAIL("cuda::memory_stats(", device, "): this build of loom has no CUDA support");
}
void reset_peak_memory_stats(int device) {
  LOOM_FAIL("cuda::reset_peak_memory_stats(", device, "): this build of loom has no CUDA support");
}
#endif

void profiler_start() {
#ifdef LOOM_WITH_CUDA
  if (is_available()) cudaProfilerStart();
#endif
}

void profiler_stop() {
#ifdef LOOM_WITH_CUDA
  if (is_available()) cudaProfilerStop();
#endif
}

#ifdef LOOM_WITH_CUDA
static_assert(kCudaErrorInsufficientDriver == int(cudaErrorInsufficientDriver) &&
              kCudaErrorNoDevice == int(cudaErrorNoDevice));
#endif

namespace {
std::string version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

std::string explain_no_device(int count_error, int driver_version, int runtime_version) {
  // Without libcuda the runtime answers "insufficient driver" too; the driver version tells.
  if (driver_version == 0) return "no NVIDIA driver is installed (libcuda.so was not found)";
  if (count_error == kCudaErrorInsufficientDriver ||
      (driver_version > 0 && driver_version < runtime_version))
    return "the NVIDIA driver is too old: it supports CUDA " + version(driver_version) +
           ", loom was built with CUDA " + version(runtime_version) + " (update the driver)";
  if (count_error == kCudaErrorNoDevice || count_error == 0)
    return "the NVIDIA driver (CUDA " + version(driver_version) + ") is installed but sees no GPU";
  return "cudaGetDeviceCount failed with error " + std::to_string(count_error);
}

}  // namespace loom::cuda
