// What the CUDA side of this machine offers: runtime, driver, cuDNN and NCCL versions and each
// device's name, memory and compute capability. Never throws on a machine without a GPU or a
// driver: the fields say what is missing. examples/envinfo.cpp prints it.
// Leaves out: live utilisation and clocks (nvidia-smi's job).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace loom::cuda {

struct DeviceProperties {
  int index = 0;
  std::string name;
  size_t total_memory = 0;   // bytes
  size_t free_memory = 0;    // bytes, at the time of the query
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
};

struct CudaInfo {
  int runtime_version = 0;  // e.g. 13000 for 13.0
  int driver_version = 0;   // 0 when no driver is installed
  int cudnn_version = 0;    // cudnnGetVersion(), e.g. 91400 for 9.14.0
  int nccl_version = 0;     // 0 when loom was built without NCCL
  int device_count = 0;
  std::string error;  // why no device is usable, when device_count is 0
  std::vector<DeviceProperties> devices;
};

CudaInfo cuda_info();

// "13.0" from 13000; "9.14.0" from a cuDNN version; "2.28.3" from an NCCL version.
std::string cuda_version_string(int v);
std::string cudnn_version_string(int v);
std::string nccl_version_string(int v);

}  // namespace loom::cuda
