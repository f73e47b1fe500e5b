// Generator: a seed and a counter offset for Philox. Each random op takes the next `n` counters,
// so draws never overlap and a (seed, offset) pair reproduces a draw exactly on any device.
// Leaves out: the random kernels (kernels/*: random_), which consume (seed, offset).
#pragma once

#include <cstdint>

#include "core/device.h"

namespace loom {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : state_{seed, 0} {}
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  // Reserves n counters and returns (seed, first counter).
  GeneratorState reserve(uint64_t n) {
    GeneratorState s = state_;
    state_.offset += n;
    return s;
  }
  GeneratorState state() const { return state_; }
  void set_state(GeneratorState s) { state_ = s; }

 private:
  GeneratorState state_;
};

// The process-wide default generator. One stream for all devices: the same seed gives the same
// numbers on the CPU and the GPU.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace loom
