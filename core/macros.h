// Portability macros shared by host and device code.
// Leaves out: anything CUDA-specific beyond the host/device qualifiers.
#pragma once

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif
