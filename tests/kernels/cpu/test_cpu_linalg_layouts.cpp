// Matrix products on operands of every stride pattern a backward pass hands them: broadcast
// (stride 0) gradients of a sum, transposed views, size-1 dimensions. Each product is checked
// against a naive float64 loop over the logical elements, on the CPU and, when present, the GPU.
// Leaves out: batched products (bmm selects these 2-d slices) and the per-op gradient table
// (cases_reduce_linalg.cpp, which feeds contiguous upstream gradients).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"

using namespace loom;

namespace {

// x[i][j] of a 2-d tensor of any strides, read through its logical indices.
double at(const Tensor& t, int64_t i, int64_t j) {
  return t.select(0, i).select(0, j).to(DType::F64).item();
}

// The naive product a (M, K) @ b (K, N) in float64.
std::vector<double> naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> out(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) out[size_t(i * N + j)] += at(a, i, k) * at(b, k, j);
  return out;
}

std::vector<Device> devices() {
  std::vector<Device> d = {kCPU};
  if (cuda::is_available()) d.push_back(cuda_device(0));
  return d;
}

// One operand layout: a name and a way to build a (R, C) tensor with that layout on a device.
struct Layout {
  std::string name;
  Tensor (*make)(int64_t R, int64_t C, const Device& dev);
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"contiguous",
       [](int64_t R, int64_t C, const Device& d) {
         return randn({R, C}, {.dtype = kF64, .device = d});
       }},
      {"transposed",
       [](int64_t R, int64_t C, const Device& d) {
         return randn({C, R}, {.dtype = kF64, .device = d}).t();
       }},
      // One value broadcast everywhere: strides (0, 0), as the gradient of a full sum.
      {"scalar_broadcast",
       [](int64_t R, int64_t C, const Device& d) {
         return randn({1, 1}, {.dtype = kF64, .device = d}).expand({R, C});
       }},
      // One row repeated: strides (0, 1).
      {"row_broadcast",
       [](int64_t R, int64_t C, const Device& d) {
         return randn({1, C}, {.dtype = kF64, .device = d}).expand({R, C});
       }},
      // One column repeated: strides (1, 0).
      {"column_broadcast",
       [](int64_t R, int64_t C, const Device& d) {
         return randn({R, 1}, {.dtype = kF64, .device = d}).expand({R, C});
       }},
  };
  return all;
}

TEST(GemmLayouts, EveryOperandLayoutMatchesTheNaiveProduct) {
  // Shapes with a size-1 side on each operand, where a stride-0 dimension can pass for a
  // leading dimension (the case Linear(in, 1) hit), and a general one.
  const std::vector<std::vector<int64_t>> shapes = {{3, 4, 1}, {1, 4, 3}, {3, 1, 4}, {4, 5, 3}};
  for (const Device& dev : devices())
    for (const auto& s : shapes)
      for (const Layout& la : layouts())
        for (const Layout& lb : layouts()) {
          const int64_t M = s[0], K = s[1], N = s[2];
          Tensor a = la.make(M, K, dev), b = lb.make(K, N, dev);
          std::vector<double> want = naive_mm(a, b);
          std::vector<double> got = mm(a, b).to(kCPU).to_vector<double>();
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 1e-12 * (1.0 + std::abs(want[i])))
                << dev.str() << " (" << M << "x" << K << ") " << la.name << " @ (" << K << "x" << N
                << ") " << lb.name << ", element " << i;
        }
}

// The bug this file was written for: sum(Linear(2, 1)(x)).backward() gave the weight the first
// row of x instead of the sum of the rows, because the broadcast gradient (2, 1) with strides
// (0, 1) was mapped as a column-major matrix with leading dimension 2.
TEST(GemmLayouts, LinearWithOneOutputGetsTheSumOfTheRows) {
  for (const Device& dev : devices())
    for (DType dt : {DType::F32, DType::F64}) {
      Tensor w = from_vector<double>({0.5, -0.25}, {1, 2}).to(dt).to(dev).requires_grad_();
      Tensor b = from_vector<double>({0.1}, {1}).to(dt).to(dev).requires_grad_();
      Tensor x = from_vector<double>({1, 2, 3, 4}, {2, 2}).to(dt).to(dev);
      linear(x, w, b).sum().backward();
      EXPECT_EQ(w.grad().to(kCPU).to_vector<double>(), (std::vector<double>{4, 6}))
          << dev.str() << " " << dtype_name(dt);
      EXPECT_EQ(b.grad().to(kCPU).to_vector<double>(), (std::vector<double>{2}))
          << dev.str() << " " << dtype_name(dt);
    }
}

}  // namespace
