// Launch configuration helpers (kernels/cuda/launch.h).
#include "kernels/cuda/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "core/cuda/check.h"

namespace loom::cuda {

namespace {
std::atomic<bool> g_naive{false};
}

int multiprocessor_count(int device) {
  static std::array<std::atomic<int>, 64> cache{};
  if (device < 0 || device >= 64) device = 0;
  int n = cache[size_t(device)].load(std::memory_order_relaxed);
  if (n == 0) {
    LOOM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cache[size_t(device)].store(n, std::memory_order_relaxed);
  }
  return n;
}

int64_t grid_for(int64_t work, int device, int per_sm) {
  int64_t needed = (work + kBlockSize - 1) / kBlockSize;
  int64_t cap = int64_t(multiprocessor_count(device)) * per_sm;
  return std::max<int64_t>(1, std::min(needed, cap));
}

void set_use_naive_kernels(bool on) { g_naive.store(on); }
bool use_naive_kernels() { return g_naive.load(std::memory_order_relaxed); }

}  // namespace loom::cuda
