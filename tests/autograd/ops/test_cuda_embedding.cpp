// embedding on the GPU: Backend::embedding_backward with many repeated ids (65536 ids over 50
// rows of 768, float32 and bfloat16) the same bits on two runs and the same bits as the CPU (both
// add each row's gradients in position order in float32, Note [Deterministic embedding backward]
// in kernels/cpu/cpu_index.cpp), close to the atomic index_add oracle; the op forward and backward
// against the CPU; an id out of range reported at the next synchronisation. Skipped without a GPU.
// Leaves out: the op table's rows, which test_cuda_op_table.cpp runs on the GPU.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "support/cuda_test_util.h"

namespace loom::testing {
namespace {

const Device kGpu = cuda_device(0);

// n ids in [0, V), half of them 0 or 1: a few rows get thousands of repeats.
Tensor skewed_ids(int64_t n, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> u = randint(0, V, {n}, {.dtype = kI64}, &gen).to_vector<int64_t>();
  for (size_t i = 0; i < u.size(); i += 2) u[i] %= 2;
  return from_vector<int64_t>(u, {n});
}

// Bitwise equality of two tensors' bytes (moved to the host).
::testing::AssertionResult same_bits(const Tensor& a0, const Tensor& b0) {
  Tensor a = a0.to(kCPU).contiguous(), b = b0.to(kCPU).contiguous();
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << describe(a) << " against " << describe(b);
  if (std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.numel()) * a.element_size()) == 0)
    return ::testing::AssertionSuccess();
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  size_t differ = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;
    if (differ++ == 0) first = i;
    worst = std::max(worst, std::fabs(x[i] - y[i]));
  }
  return ::testing::AssertionFailure()
         << differ << " elements differ, the first at " << first << " (" << x[first] << " against "
         << y[first] << "), the largest difference " << worst;
}

TEST(CudaEmbedding, BackwardWithManyRepeatsIsDeterministicAndEqualsTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t N = 65536, V = 50, D = 768;
  Tensor ids = skewed_ids(N, V, 1);
  Tensor ids_gpu = ids.to(kGpu);
  Generator gen(2);
  Tensor g64 = randn({N, D}, {.dtype = kF64}, &gen);
  for (DType dt : {kF32, kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor g = g64.to(dt), g_gpu = g.to(kGpu);
    Tensor first = backend_for(kGpu).embedding_backward(g_gpu, ids_gpu, V);
    Tensor second = backend_for(kGpu).embedding_backward(g_gpu, ids_gpu, V);
    EXPECT_TRUE(first.device().is_cuda());
    EXPECT_EQ(first.dtype(), dt);
    EXPECT_TRUE(same_bits(first, second));
    EXPECT_TRUE(same_bits(first, backend_for(kCPU).embedding_backward(g, ids, V)));
    // The oracle: atomic adds of the same values in float32, in any order. Rows 0 and 1 sum about
    // 16000 terms of size 1 with partial sums of a few hundred: each rounding is at most
    // 2^-24 * 256 = 1.5e-5, and 16000 of them in a random walk about 130 times that, 2e-3, per
    // order; 1e-2 allows for two orders. bf16 adds its one rounding, 2^-8 relative at most.
    Tensor oracle = backend_for(kGpu).index_add({V, D}, 0, ids_gpu, g_gpu.to(kF32)).to(kCPU);
    std::vector<double> o = oracle.to_vector<double>(), got = first.to_vector<double>();
    const double rel = dt == kBF16 ? 1.0 / 256 : 0.0;
    for (size_t i = 0; i < o.size(); ++i)
      ASSERT_NEAR(got[i], o[i], std::fabs(o[i]) * rel + 1e-2) << "element " << i;
  }
}

TEST(CudaEmbedding, OpForwardAndBackwardMatchTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t V = 1000, D = 96;
  Tensor ids = skewed_ids(8 * 257, V, 3).view({8, 257});  // (B, T) with an odd T
  Generator gen(4);
  Tensor w = randn({V, D}, {}, &gen), r = randn({8, 257, D}, {}, &gen);
  Tensor wc = w.clone().requires_grad_(true), wg = w.to(kGpu).requires_grad_(true);
  Tensor yc = embedding(wc, ids), yg = embedding(wg, ids.to(kGpu));
  EXPECT_TRUE(same_bits(yc, yg));  // a gather: exact
  (yc * r).sum().backward();
  (yg * r.to(kGpu)).sum().backward();
  EXPECT_TRUE(same_bits(wc.grad(), wg.grad()));
  Tensor first = wg.grad().clone();
  wg.set_grad(Tensor());
  (embedding(wg, ids.to(kGpu)) * r.to(kGpu)).sum().backward();
  EXPECT_TRUE(same_bits(first, wg.grad()));
}

TEST(CudaEmbedding, IdOutOfRangeIsReportedAtTheNextSync) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor g = randn({3, 4}, {.device = kGpu});
  Tensor bad = from_vector<int64_t>({1, 9, 2}, {3}).to(kGpu);
  Tensor out = backend_for(kGpu).embedding_backward(g, bad, 5);
  try {
    loom::cuda::synchronize(0);
    FAIL() << "no error for id 9 with 5 rows";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("embedding_backward: id 9 (position 1) is out of range [0, 5)"),
        std::string::npos)
        << e.what();
  }
  // The bad position was skipped: the other rows hold their gradients.
  std::vector<double> o = out.to_vector<double>(), gv = g.to_vector<double>();
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(o[size_t(1 * 4 + d)], gv[size_t(0 * 4 + d)]);
    EXPECT_EQ(o[size_t(2 * 4 + d)], gv[size_t(2 * 4 + d)]);
  }
}

}  // namespace
}  // namespace loom::testing
