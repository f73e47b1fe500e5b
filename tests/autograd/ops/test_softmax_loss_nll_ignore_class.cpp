// nll_loss and cross_entropy when ignore_index is a real class (inside [0, C)): rows whose target
// is that class contribute nothing to the loss and get a zero gradient, exactly. (The H200 found
// the CUDA backward writing a gradient into those rows; the float64 finite-difference check of
// the op table, cases nll_loss_*_ignore_class, says this CPU answer is the right one.)
#include <gtest/gtest.h>

#include "autograd/ops/ops.h"

using namespace loom;

TEST(NllIgnoreClass, IgnoredRowsGetExactlyZeroGradient) {
  // logp (3, 4); targets {2, 1, 2} with ignore_index 2: only row 1 counts.
  for (Reduction r : {Reduction::Sum, Reduction::Mean, Reduction::None}) {
    Tensor logp =
        from_vector<double>(std::vector<double>(12, -1.5), {3, 4}, /*requires_grad=*/true);
    Tensor target = from_vector<int64_t>({2, 1, 2}, {3});
    Tensor loss = nll_loss(logp, target, r, /*ignore_index=*/2);
    (r == Reduction::None ? sum(loss) : loss).backward();
    std::vector<double> g = logp.grad().to_vector<double>();
    for (int64_t i = 0; i < 12; ++i)
      EXPECT_EQ(g[size_t(i)], i == 4 + 1 ? -1.0 : 0.0) << "element " << i;
    if (r != Reduction::None) {
      EXPECT_EQ(loss.item(), 1.5);
    }
  }
}
