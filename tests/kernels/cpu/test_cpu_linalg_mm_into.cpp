// Backend::mm_into_ on the CPU: the product written into an existing tensor (a row block of a
// bigger one) or added to it, in float32 and float64 and from bfloat16 into float32 or bfloat16,
// with a transposed operand, against a float64 reference; and its errors. The CUDA backend's
// against these: tests/kernels/cuda/matmul/test_cuda_linalg_mm_into.cpp.
#include <gtest/gtest.h>

#include <string>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "kernels/raw_ops.h"
#include "support/errors.h"

using namespace loom;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

// What mm_into_ throws for these arguments.
std::string mm_into_error(const Tensor& out, const Tensor& a, const Tensor& b) {
  return test::error_of([&] { backend_for(kCPU).mm_into_(out, a, b, false); });
}

}  // namespace

TEST(MmInto, WritesARowBlockAndAddsToItsSum) {
  Generator gen(41);
  Backend& be = backend_for(kCPU);
  struct Case {
    DType in, out;
    double tol;
  };
  for (Case c : {Case{kF64, kF64, 1e-12}, Case{kF32, kF32, 1e-5}, Case{kBF16, kF32, 1e-5},
                 Case{kBF16, kBF16, 2e-2}}) {
    SCOPED_TRACE(str(dtype_name(c.in), " -> ", dtype_name(c.out)));
    Tensor a = randn({5, 9}, {}, &gen).to(c.in), bt = randn({7, 9}, {}, &gen).to(c.in);
    const Tensor b = bt.t();  // (9, 7), a transposed view
    const Tensor want = mm(a.to(kF64), b.to(kF64));
    Tensor big = zeros({8, 7}, {.dtype = c.out});
    Tensor rows = raw::slice(big, 0, 2, 7, 1);  // rows 2..6, contiguous
    be.mm_into_(rows, a, b, false);
    EXPECT_LT(max_abs_diff(rows, want), c.tol * 10);
    EXPECT_EQ(max(abs(big.slice(0, 0, 2).to(kF64))).item(), 0.0) << "rows outside are untouched";
    EXPECT_EQ(max(abs(big.slice(0, 7, 8).to(kF64))).item(), 0.0);
    Tensor acc = full({5, 7}, 0.5, {.dtype = c.out});
    be.mm_into_(acc, a, b, true);
    be.mm_into_(acc, a, b, true);
    EXPECT_LT(max_abs_diff(acc, want * 2.0 + 0.5), c.tol * 20);
  }
}

TEST(MmInto, AnEmptySumWritesZerosOrAddsNothing) {
  Backend& be = backend_for(kCPU);
  Tensor a = zeros({3, 0}), b = zeros({0, 4});
  Tensor out = full({3, 4}, 2.0);
  be.mm_into_(out, a, b, true);
  EXPECT_EQ(min(out).item(), 2.0);
  be.mm_into_(out, a, b, false);
  EXPECT_EQ(max(abs(out)).item(), 0.0);
}

TEST(MmInto, BadArgumentsAreNamed) {
  Tensor a = randn({3, 4}), b = randn({4, 5});
  const std::string shape = mm_into_error(zeros({3, 6}), a, b);
  EXPECT_NE(shape.find("mm_into_"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[3, 6]"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[4, 5]"), std::string::npos) << shape;
  const std::string strided = mm_into_error(zeros({5, 3}).t(), a, b);
  EXPECT_NE(strided.find("contiguous"), std::string::npos) << strided;
  const std::string dtype = mm_into_error(zeros({3, 5}, {.dtype = kF64}), a, b);
  EXPECT_NE(dtype.find("out_dtype"), std::string::npos) << dtype;
  const std::string mixed = mm_into_error(zeros({3, 5}), a, b.to(kF64));
  EXPECT_NE(mixed.find("one dtype"), std::string::npos) << mixed;
  EXPECT_NO_THROW(backend_for(kCPU).mm_into_(zeros({3, 5}), a, b, false));
}
