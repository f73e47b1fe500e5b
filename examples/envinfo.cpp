// envinfo: the first program to run on a new machine. Prints loom's version and build options,
// the CUDA runtime, driver, cuDNN and NCCL versions, and every GPU with its memory and compute
// capability -- or, on a machine without a GPU (or a CPU-only build), says so plainly -- and the
// NCCL_* variables that change NCCL's behaviour (run it on every node: the versions should match).
// Leaves out: the network (which interfaces reach the other nodes).
//
//   ./build/examples/envinfo
#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <string>

#include "core/cuda/available.h"
#include "core/cuda/device_info.h"
#include "core/parallel.h"
#include "distributed/process_group/explain_nccl.h"

namespace {

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void print_build() {
  std::printf("loom %s\n", LOOM_VERSION);
  std::printf("  compiler           %s\n", __VERSION__);
#ifdef NDEBUG
  std::printf("  assertions         off (release build)\n");
#else
  std::printf("  assertions         on (debug build)\n");
#endif
  std::printf("  Eigen              %d.%d.%d\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
              EIGEN_MINOR_VERSION);
  std::printf("  CPU threads        %d (OpenMP)\n", loom::cpu::num_threads());
  if (loom::cuda::compiled_with_cuda())
    std::printf("  CUDA backend       compiled in\n");
  else
    std::printf("  CUDA backend       not compiled in (configure with -DLOOM_CUDA=ON)\n");
#ifdef LOOM_WITH_NCCL
  std::printf("  NCCL               compiled in\n");
#else
  std::printf("  NCCL               not compiled in\n");
#endif
#ifdef LOOM_WITH_GLOO
  std::printf("  Gloo               compiled in\n");
#else
  std::printf("  Gloo               not compiled in\n");
#endif
}

void print_cuda(const loom::cuda::CudaInfo& info) {
  using namespace loom::cuda;
  std::printf("CUDA\n");
  std::printf("  runtime            %s\n", cuda_version_string(info.runtime_version).c_str());
  if (info.driver_version > 0)
    std::printf("  driver             supports CUDA %s\n",
                cuda_version_string(info.driver_version).c_str());
  else
    std::printf("  driver             none installed\n");
  std::printf("  cuDNN              %s\n", cudnn_version_string(info.cudnn_version).c_str());
  std::printf("  available          %s\n", yes_no(info.device_count > 0));
  std::printf("  devices            %d\n", info.device_count);
  if (info.device_count == 0)
    std::printf("  why none           %s: loom runs on the CPU only\n", info.error.c_str());
  for (const DeviceProperties& d : info.devices) {
    std::printf(
        "  cuda:%d             %s, %.1f GiB (%.1f GiB free), compute capability %d.%d, %d SMs\n",
        d.index, d.name.c_str(), double(d.total_memory) / double(1 << 30),
        double(d.free_memory) / double(1 << 30), d.major, d.minor, d.multiprocessors);
  }
}

// NCCL's version and the variables that change what it does (set or not), then any other
// NCCL_* variable set.
void print_nccl(int version) {
  namespace dist = loom::distributed;
  std::printf("NCCL\n");
  if (version > 0)
    std::printf("  version            %s\n", loom::cuda::nccl_version_string(version).c_str());
  else
    std::printf("  version            not compiled in\n");
  auto env = dist::nccl_environment();
  const auto& keys = dist::nccl_key_variables();
  for (const std::string& k : keys) {
    auto it = std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == k; });
    const char* unset =
        k == "NCCL_NVLS_ENABLE" ? "(not set; loom's communicators set it to 0)" : "(not set)";
    std::printf("  %-18s %s\n", k.c_str(), it == env.end() ? unset : it->second.c_str());
  }
  for (const auto& [k, v] : env)
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      std::printf("  %-18s %s\n", k.c_str(), v.c_str());
}

}  // namespace

int main() {
  try {
    print_build();
    int nccl_version = 0;
    if (loom::cuda::compiled_with_cuda()) {
      loom::cuda::CudaInfo info = loom::cuda::cuda_info();
      print_cuda(info);
      nccl_version = info.nccl_version;
    } else {
      std::printf("CUDA\n  available          no (this build of loom has no CUDA support)\n");
    }
    print_nccl(nccl_version);
    return 0;
  } catch (const std::exception& e) {  // loom::Error and anything else: one line, exit code 1
    std::fprintf(stderr, "envinfo: error: %s\n", e.what());
    return 1;
  }
}
