// The CUDA nll_loss backward when ignore_index is a real class (inside [0, C)): rows whose target
// is that class get exactly zero gradient, as on the CPU
// (tests/autograd/ops/test_softmax_loss_nll_ignore_class.cpp). Before the fix the kernel wrote
// -grad * scale at column t of those rows.
#include <gtest/gtest.h>

#include "support/cuda_test_util.h"

using namespace loom;

TEST(CudaNllIgnoreClass, IgnoredRowsGetExactlyZeroGradient) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu(DeviceType::CUDA, 0);
  for (DType dt : {kF32, kF16, kBF16, kF64}) {
    for (Reduction r : {Reduction::Sum, Reduction::Mean, Reduction::None}) {
      Tensor logp = full({3, 4}, -1.5, {.dtype = dt, .device = gpu, .requires_grad = true});
      Tensor target = to(from_vector<int64_t>({2, 1, 2}, {3}), gpu);
      Tensor loss = nll_loss(logp, target, r, /*ignore_index=*/2);
      (r == Reduction::None ? sum(loss) : loss).backward();
      std::vector<double> g = logp.grad().to(kF64).to(kCPU).to_vector<double>();
      for (int64_t i = 0; i < 12; ++i)
        EXPECT_EQ(g[size_t(i)], i == 4 + 1 ? -1.0 : 0.0) << dtype_name(dt) << " element " << i;
    }
  }
}
