// Whether CUDA can be used, asked without CUDA headers: compiled into every build, so a program
// asks `loom::cuda::is_available()` with no #ifdef (a build without CUDA answers 0 devices).
// Leaves out: everything else about devices (core/cuda/device_info.h, core/cuda/stream.h).
#pragma once

#include <string>

namespace loom::cuda {

// The most devices one process addresses (the per-device tables are this long).
constexpr int kMaxCudaDevices = 64;

// True when loom was compiled with its CUDA backend (LOOM_WITH_CUDA).
bool compiled_with_cuda();
// The number of usable CUDA devices: 0 without the CUDA backend, a driver, or a GPU. Never throws.
int device_count();
bool is_available();  // device_count() > 0

// Why no CUDA device is usable, in words, from what the runtime answered: cudaGetDeviceCount's
// error code (0 = success with 0 devices), cudaDriverGetVersion's version (0 = no driver
// installed) and the runtime version loom was built with. Tells apart no driver, a driver too old
// for the runtime, and a driver that sees no GPU. Plain ints so that it is testable everywhere.
std::string explain_no_device(int count_error, int driver_version, int runtime_version);
// The error codes it reads (cudaError_t values, stable across CUDA versions).
constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorNoDevice = 100;

}  // namespace loom::cuda
