// The per-rank memory report: see train/memory_probe.h (Note [Memory report]).
#include "train/memory_probe.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "autograd/ops/factory.h"
#include "core/allocator.h"
#include "core/cuda/available.h"

namespace loom::train {

namespace {
// Allocated bytes on `d` now, and the peak since the last reset.
std::pair<int64_t, int64_t> allocator_bytes(Device d) {
  if (d.is_cuda()) {
    auto s = cuda::memory_stats(d.index);
    return {int64_t(s.allocated), int64_t(s.peak_allocated)};
  }
  auto s = cpu_alloc_stats();
  return {int64_t(s.live_bytes), int64_t(s.peak_live_bytes)};
}

std::string mib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  return buf;
}
}  // namespace

MemoryProbe::MemoryProbe(Device device) : device_(device) {
  resident_ = allocator_bytes(device).first;
  if (device.is_cuda())
    cuda::reset_peak_memory_stats(device.index);
  else
    reset_cpu_peak();
}

void MemoryProbe::report(const RunSetup& run, distributed::ParallelModel& model) const {
  const distributed::ParallelModel::Memory m = model.memory();
  std::vector<int64_t> mine{m.parameters, m.gradients, m.optimizer_state, 0, 0};
  mine[4] = allocator_bytes(device_).second;
  mine[3] = std::max<int64_t>(0, mine[4] - resident_ - mine[1] - mine[2]);
  Tensor t = from_vector(mine, {5}).to(run.device);
  Tensor all = zeros({5 * int64_t(run.world)}, {.dtype = DType::I64, .device = run.device});
  run.pg->all_gather(all, t)->wait();
  if (!run.main()) return;
  std::vector<int64_t> v = all.to(kCPU).to_vector<int64_t>();
  std::printf("memory per rank after the first step (%s allocator):\n",
              device_.is_cuda() ? "CUDA caching" : "CPU");
  for (int r = 0; r < run.world; ++r) {
    const int64_t* m = &v[size_t(r) * 5];
    std::printf(
        "  rank %d: parameters %s, gradients %s, optimizer state %s, activations and "
        "temporaries %s, peak %s\n",
        r, mib(m[0]).c_str(), mib(m[1]).c_str(), mib(m[2]).c_str(), mib(m[3]).c_str(),
        mib(m[4]).c_str());
  }
}

}  // namespace loom::train
