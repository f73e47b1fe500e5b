// MemoryProbe: each rank's memory after the first training step, in the terms the tutorials use
// (parameters, gradients, optimizer state, activations), printed by rank 0. Leaves out: a
// per-tensor or per-module breakdown, and the allocator's reserved cache.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "distributed/parallel/parallel_model.h"
#include "train/run_setup.h"

namespace loom::train {

// Note [Memory report]
// Made before the first step, it notes the bytes the allocator of the run's device holds
// (weights, data, everything resident) and resets the peak; report() after the first step
// prints, from rank 0, one line per rank: parameters, gradients and optimizer state (the
// tensors' sizes; under ZeRO the rank's shards), activations and temporaries (the step's peak
// less what was resident before it, the gradients and the state: what the step added and freed
// again), and the peak. CPU: the CPU allocator's counters (glibc's usable sizes); CUDA: the
// caching allocator's (allocated bytes, not the reserved cache).
class MemoryProbe {
 public:
  explicit MemoryProbe(Device device);
  // A collective: every rank calls it once, after its first step.
  void report(const RunSetup& run, distributed::ParallelModel& model) const;

 private:
  Device device_;
  int64_t resident_ = 0;
};

}  // namespace loom::train
