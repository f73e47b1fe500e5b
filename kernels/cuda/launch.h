// Launch configuration shared by the CUDA kernels, and the switch that sends elementwise,
// reduction and softmax launches to their naive kernels (the tests compare the two paths).
// Leaves out: occupancy tuning per kernel (one block size, grids sized to fill the device).
#pragma once

#include <cstdint>

namespace loom::cuda {

constexpr int kBlockSize = 256;

int multiprocessor_count(int device);  // cached per device

// Blocks for a grid-stride loop over `work` items of kBlockSize per block: as many as needed,
// but no more than `per_sm` resident blocks on each multiprocessor (one full wave).
int64_t grid_for(int64_t work, int device, int per_sm = 8);

// Test switch: when on, kernels that have a naive version launch it instead of the fast one.
void set_use_naive_kernels(bool on);
bool use_naive_kernels();

}  // namespace loom::cuda
