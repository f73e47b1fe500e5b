// The key under which the CUDA backend caches a library plan (a cuBLASLt matmul, a cuDNN
// convolution): every size, stride and setting the plan depends on, as an array of int64, and the
// hash the caches' unordered_maps use.
// Leaves out: what goes into each key (each cache builds its own: lt_matmul.cpp,
// cudnn_conv_graph.cpp, cudnn_conv_legacy.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace loom::cuda {

template <size_t N>
using PlanKeyOf = std::array<int64_t, N>;

// FNV-1a over the key's 64-bit words.
struct PlanKeyHash {
  template <size_t N>
  size_t operator()(const PlanKeyOf<N>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) {
      h ^= uint64_t(v);
      h *= 1099511628211ull;
    }
    return size_t(h);
  }
};

}  // namespace loom::cuda
