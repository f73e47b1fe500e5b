// What elementwise ops keep alive for backward: relu saves its output, which the next layer
// holds anyway, so relu(a + b) at the end of a residual block leaves the sum to be freed. The
// gradient stays g where x > 0 and 0 elsewhere. Leaves out: the other ops' saved tensors (their
// gradients are checked by the op table, tests/autograd/test_op_table.cpp).
#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "core/allocator.h"

using namespace loom;

TEST(ElementwiseSaved, ReluKeepsItsOutputAndLetsItsInputGo) {
  const int64_t n = 1 << 20;  // 4 MiB per float32 tensor
  Tensor a = randn({n}).requires_grad_(true), b = randn({n}).requires_grad_(true);
  if (cpu_alloc_stats().live_bytes == 0) GTEST_SKIP() << "no malloc_usable_size here";
  const uint64_t base = cpu_alloc_stats().live_bytes;
  Tensor y = relu(a + b);  // the sum is a temporary: only y (and its saved alias) stays
  const double held = double(cpu_alloc_stats().live_bytes - base);
  EXPECT_LT(held, 1.25 * double(n) * 4) << "relu kept more than its output alive";
  EXPECT_GT(held, 0.75 * double(n) * 4);
  Tensor g = randn({n});
  sum(y * g).backward();
  Tensor want = where(gt(a.detach() + b.detach(), zeros({n})), g, zeros({n}));
  EXPECT_EQ(max(abs(a.grad() - want)).item(), 0.0);
  EXPECT_EQ(max(abs(b.grad() - want)).item(), 0.0);
}
