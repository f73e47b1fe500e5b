// CUDA SwiGLU backward (kernels/cuda/elementwise/cuda_swiglu.cu) against the CPU's loop
// (kernels/cpu/cpu_swiglu.cpp) on the same inputs, in every floating dtype: separate contiguous
// tensors (16-byte loads), the two halves of one packed projection (row-strided, read in place),
// odd widths (one value at a time), a transposed layout (copied first) and the naive switch. The
// forward (the elementwise op Swiglu) is in
// CudaElementwise.BinaryOpsMatchCpuInEveryDtypeWithBroadcasting (test_cuda_elementwise.cpp).
// Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/cuda/available.h"
#include "kernels/backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/raw_ops.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

using Split = std::function<std::pair<Tensor, Tensor>(const Tensor&)>;  // gate, up of a tensor

// swiglu_backward of grad and split(packed) on the CPU and on the GPU.
void compare(const std::string& what, const Tensor& packed, const Split& split, DType d) {
  SCOPED_TRACE(what + " " + dtype_name(d));
  const Device g = cuda_device(0);
  const Tensor p = packed.to(d), pg = p.to(g);
  auto [a, b] = split(p);
  auto [ag, bg] = split(pg);
  const Tensor grad = randn(a.shape()).to(d);
  TensorPair want = backend_for(kCPU).swiglu_backward(grad, a, b);
  TensorPair got = backend_for(g).swiglu_backward(grad.to(g), ag, bg);
  EXPECT_TRUE(all_close(want.first, got.first.to(kCPU), forward_tol(d))) << "d gate";
  EXPECT_TRUE(all_close(want.second, got.second.to(kCPU), forward_tol(d))) << "d up";
}

}  // namespace

TEST(CudaSwiglu, BackwardMatchesTheCpuInEveryDtypeAndLayout) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  manual_seed(1);
  const Split halves = [](const Tensor& t) {  // (.., 2 I) -> the two (.., I) halves
    const int64_t I = t.size(-1) / 2;
    return std::make_pair(raw::slice(t, t.dim() - 1, 0, I, 1),
                          raw::slice(t, t.dim() - 1, I, 2 * I, 1));
  };
  const Split pair = [](const Tensor& t) {  // (2, ...) -> t[0], t[1]
    return std::make_pair(raw::select(t, 0, 0), raw::select(t, 0, 1));
  };
  const Split transposed = [](const Tensor& t) {
    return std::make_pair(raw::transpose(raw::select(t, 0, 0), 0, 1),
                          raw::transpose(raw::select(t, 0, 1), 0, 1));
  };
  for (DType d : {kF32, kF64, kBF16, kF16})
    for (bool naive : {false, true}) {
      cuda::set_use_naive_kernels(naive);
      compare("contiguous", randn({2, 6, 64}), pair, d);
      compare("packed halves", randn({3, 5, 128}), halves, d);
      compare("odd width", randn({2, 7, 13}), pair, d);
      compare("transposed", randn({2, 24, 40}), transposed, d);
      cuda::set_use_naive_kernels(false);
    }
}

#endif  // LOOM_WITH_CUDA
