// Finding the backend of a device, and the names of the elementwise ops.
#include "kernels/backend.h"

#include "kernels/cpu/cpu_backend.h"
#ifdef LOOM_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace loom {

Backend& backend_for(Device d) {
  if (d.is_cpu()) return cpu::cpu_backend();
#ifdef LOOM_WITH_CUDA
  return cuda::cuda_backend();
#else
  LOOM_FAIL("backend_for(", d,
            "): this build of loom has no CUDA support (configure with -DLOOM_CUDA=ON)");
#endif
}

bool has_backend(DeviceType t) {
#ifdef LOOM_WITH_CUDA
  return t == DeviceType::CPU || t == DeviceType::CUDA;
#else
  return t == DeviceType::CPU;
#endif
}

}  // namespace loom
