// Device count in every build (core/cuda/available.h): the one file of core/cuda/ that is compiled
// without the CUDA backend too.
#include "core/cuda/available.h"

#include <algorithm>

#ifdef LOOM_WITH_CUDA
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

}  // namespace loom::cuda
