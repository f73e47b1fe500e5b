// Whether CUDA can be used, asked without CUDA headers: compiled into every build, so a program
// asks `loom::cuda::is_available()` with no #ifdef (a build without CUDA answers 0 devices).
// Leaves out: everything else about devices (core/cuda/device_info.h, core/cuda/stream.h).
#pragma once

namespace loom::cuda {

// The most devices one process addresses (the per-device tables are this long).
constexpr int kMaxCudaDevices = 64;

// True when loom was compiled with its CUDA backend (LOOM_WITH_CUDA).
bool compiled_with_cuda();
// The number of usable CUDA devices: 0 without the CUDA backend, a driver, or a GPU. Never throws.
int device_count();
bool is_available();  // device_count() > 0

}  // namespace loom::cuda
