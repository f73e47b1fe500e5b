// Lazily created per-device cuBLASLt and cuDNN handles (see blas_handle.h).
// Leaves out: destroying them: handles live until exit (cuDNN's: until their thread exits), which
// avoids ordering problems with the CUDA context's teardown (the driver frees them with it).
#include "kernels/cuda/blas_handle.h"

#include <mutex>
#include <vector>

#include "core/cuda/stream.h"
#include "core/error.h"
#include "kernels/cuda/library_check.h"

namespace loom::cuda {

namespace {

template <typename H>
struct PerDevice {
  std::mutex mu;
  std::vector<H> handles;
};

void check_device(int device) {
  LOOM_CHECK(device >= 0 && device < device_count(), "CUDA handle: device ", device,
             " does not exist (", device_count(), " CUDA devices)");
}

}  // namespace

cublasLtHandle_t lt_handle(int device) {
  static PerDevice<cublasLtHandle_t> table;
  std::lock_guard<std::mutex> lock(table.mu);
  if (int(table.handles.size()) <= device) {
    check_device(device);
    table.handles.resize(size_t(device) + 1, nullptr);
  }
  if (!table.handles[device]) {
    DeviceGuard guard(device);
    LOOM_CUBLAS_CHECK(cublasLtCreate(&table.handles[device]));
  }
  return table.handles[device];
}

// Per thread: cudnnSetStream followed by a call is not atomic, so threads must not share a handle.
cudnnHandle_t dnn_handle(int device) {
  thread_local std::vector<cudnnHandle_t> handles;
  if (int(handles.size()) <= device) {
    check_device(device);
    handles.resize(size_t(device) + 1, nullptr);
  }
  if (!handles[device]) {
    DeviceGuard guard(device);
    LOOM_CUDNN_CHECK(cudnnCreate(&handles[device]));
  }
  LOOM_CUDNN_CHECK(cudnnSetStream(handles[device], current_stream(device)));
  return handles[device];
}

}  // namespace loom::cuda
