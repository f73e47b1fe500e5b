// The global TF32 switch of the CUDA backend (see Note [Strict fp32] in math_mode.h).
// Leaves out: per-thread or per-device settings.
#include "kernels/cuda/math_mode.h"

#include <atomic>

namespace loom::cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace loom::cuda
