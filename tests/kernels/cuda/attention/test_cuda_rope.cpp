// CUDA rotary embedding (kernels/cuda/attention/cuda_rope.cu) against the CPU's loops
// (kernels/cpu/cpu_rope.cpp) on the same inputs and tables: float32, float64, bfloat16 and float16;
// the 4-pairs kernel (contiguous x, and the (B, H, T, D) view of a (B, T, H, D) projection, whose
// layout the output keeps), the 1-pair kernel (an odd half, a strided head dim) and the naive one;
// an offset, a positions tensor, the inverse rotation; a position outside the table reported at the
// next synchronisation. Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/available.h"
#include "kernels/backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/raw_ops.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// cos and sin tables (P, half) of some angles, in the table dtype for x's dtype.
std::pair<Tensor, Tensor> tables(int64_t P, int64_t half, DType x) {
  std::vector<double> a = randn({P, half}, {.dtype = kF64}).to_vector<double>(), c, s;
  for (double v : a) c.push_back(std::cos(3 * v)), s.push_back(std::sin(3 * v));
  const DType t = x == kF64 ? kF64 : kF32;
  return {raw::cast(from_vector(c, {P, half}), t), raw::cast(from_vector(s, {P, half}), t)};
}

using Layout = std::function<Tensor(const Tensor&)>;  // a view of a contiguous tensor

// Runs rope on the CPU and the GPU on layout(base) (the same view of the same values on each).
void compare(const std::string& what, const Tensor& base, const Layout& layout, int64_t P,
             bool with_positions, bool inverse) {
  const Tensor x = layout(base), xg = layout(base.to(cuda_device(0)));
  SCOPED_TRACE(what + " " + dtype_name(x.dtype()) + (with_positions ? " positions" : " offset") +
               (inverse ? " inverse" : ""));
  const Device g = cuda_device(0);
  auto [c, s] = tables(P, x.size(3) / 2, x.dtype());
  Tensor pos = with_positions ? randint(0, P, {x.size(0), x.size(2)}) : Tensor();
  const int64_t offset = with_positions ? 0 : P - x.size(2);
  Tensor want = backend_for(kCPU).rope(x, c, s, pos, offset, inverse);
  Tensor got =
      backend_for(g).rope(xg, c.to(g), s.to(g), with_positions ? pos.to(g) : pos, offset, inverse);
  EXPECT_EQ(got.strides(), want.strides());
  EXPECT_TRUE(all_close(want, got.to(kCPU), forward_tol(x.dtype())));
}

}  // namespace

TEST(CudaRope, MatchesTheCpuInEveryDtypeLayoutAndKernel) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  manual_seed(1);
  for (DType d : {kF32, kF64, kBF16, kF16})
    for (bool naive : {false, true}) {
      cuda::set_use_naive_kernels(naive);
      const std::string k = naive ? "naive" : "fast";
      const Layout same = [](const Tensor& t) { return t; };
      const Layout heads = [](const Tensor& t) { return raw::transpose(t, 1, 2); };
      const Layout last = [](const Tensor& t) { return raw::transpose(t, 2, 3); };
      for (bool pos : {false, true})
        for (bool inv : {false, true}) {
          compare(k + " contiguous", randn({2, 3, 5, 16}).to(d), same, 40, pos, inv);
          // (B, T, H, D) memory seen as (B, H, T, D): the layout a projection gives.
          compare(k + " heads view", randn({2, 5, 3, 16}).to(d), heads, 40, pos, inv);
          compare(k + " odd half", randn({1, 2, 4, 6}).to(d), same, 9, pos, inv);
          compare(k + " strided head dim", randn({1, 2, 16, 3}).to(d), last, 9, pos, inv);
        }
      cuda::set_use_naive_kernels(false);
    }
}

TEST(CudaRope, APositionOutsideTheTableIsReportedAtTheNextSynchronisation) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device g = cuda_device(0);
  auto [c, s] = tables(10, 4, kF32);
  Tensor pos = from_vector<int64_t>({0, 3, 12, 1}, {1, 4}).to(g);
  backend_for(g).rope(randn({1, 2, 4, 8}).to(g), c.to(g), s.to(g), pos, 0, false);
  try {
    cuda::synchronize(0);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rope: position 12"), std::string::npos) << m;
    EXPECT_NE(m.find("[0, 10)"), std::string::npos) << m;
  }
}

#endif  // LOOM_WITH_CUDA
