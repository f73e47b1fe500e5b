// Mixed precision on CUDA: the fused unscale kernel and the scale update agree exactly with the
// CPU reference (many tensors, chunk edges, inf and NaN), and autocast's bf16/f16 products and
// convolutions match float32 within the low precision, with float32 gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "autograd/ops/optim.h"
#include "support/cuda_test_util.h"

using namespace loom;

namespace {

bool have_gpu() { return cuda::is_available(); }

// Gradients of awkward sizes (one element, chunk edges, a large one) with `bad` at `bad_at`
// of tensor `bad_tensor` (-1: none).
std::vector<Tensor> grads_cpu(float bad, int bad_tensor, int64_t bad_at) {
  std::vector<int64_t> sizes = {1, 8191, 8192, 8193, 100000, 3};
  std::vector<Tensor> gs;
  manual_seed(9);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor g = randn({sizes[i]}) * 1000.0;
    if (int(i) == bad_tensor) g.data<float>()[bad_at] = bad;
    gs.push_back(g);
  }
  return gs;
}

}  // namespace

TEST(CudaAmp, UnscaleMatchesTheCpuKernelBitForBit) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float bad;
    int tensor;
    int64_t at;
  };
  for (Case c : {Case{0.f, -1, 0}, Case{inf, 4, 99999}, Case{-inf, 2, 8191},
                 Case{std::nanf(""), 0, 0}, Case{inf, 3, 8192}}) {
    SCOPED_TRACE("bad tensor " + std::to_string(c.tensor) + " at " + std::to_string(c.at));
    std::vector<Tensor> cpu = grads_cpu(c.bad, c.tensor, c.at), gpu;
    for (const Tensor& g : cpu) gpu.push_back(g.to(cuda_device(0)));
    Tensor found_cpu = zeros({1}), scale_cpu = full({1}, 3.0);  // 1/3: not a power of two
    Tensor found_gpu = found_cpu.to(cuda_device(0)), scale_gpu = scale_cpu.to(cuda_device(0));
    amp_unscale_(cpu, found_cpu, scale_cpu);
    amp_unscale_(gpu, found_gpu, scale_gpu);
    EXPECT_EQ(found_gpu.item(), found_cpu.item());
    EXPECT_EQ(found_cpu.item(), c.tensor >= 0 ? 1.0 : 0.0);
    for (size_t i = 0; i < cpu.size(); ++i) {
      std::vector<float> a = cpu[i].to_vector<float>(), b = gpu[i].to_vector<float>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) {
        if (std::isnan(a[j])) {
          EXPECT_TRUE(std::isnan(b[j]));
          continue;
        }
        ASSERT_EQ(a[j], b[j]) << "tensor " << i << " element " << j;
      }
    }
  }
}

TEST(CudaAmp, ScaleUpdateMatchesTheCpuSchedule) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Device d = cuda_device(0);
  Tensor s_c = full({1}, 1024.0), t_c = zeros({1}, {.dtype = kI32}), f_c = zeros({1});
  Tensor s_g = s_c.to(d), t_g = t_c.to(d), f_g = f_c.to(d);
  for (int i = 0; i < 12; ++i) {
    double flag = (i % 5 == 4) ? 1.0 : 0.0;
    f_c.fill_(flag);
    f_g.fill_(flag);
    amp_update_scale_(s_c, t_c, f_c, 2.0, 0.5, 3);
    amp_update_scale_(s_g, t_g, f_g, 2.0, 0.5, 3);
    ASSERT_EQ(s_g.item(), s_c.item()) << "update " << i;
    ASSERT_EQ(t_g.item(), t_c.item()) << "update " << i;
  }
}

TEST(CudaAmp, AutocastLinearAndConvMatchFloat32WithFloat32Gradients) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Device d = cuda_device(0);
  for (DType low : {kBF16, kF16}) {
    SCOPED_TRACE(dtype_name(low));
    manual_seed(4);
    Tensor x = randn({8, 3, 10, 10}, {.device = d});
    Tensor w = randn({6, 3, 3, 3}, {.device = d, .requires_grad = true});
    Tensor lw = randn({5, 6 * 8 * 8}, {.device = d, .requires_grad = true});
    Tensor lb = randn({5}, {.device = d, .requires_grad = true});
    auto f = [&] { return linear(relu(conv2d(x, w)).flatten(1) * 0.1, lw, lb); };
    Tensor ref = f();
    Tensor y;
    {
      amp::Autocast guard(low);
      y = f();
    }
    EXPECT_EQ(y.dtype(), low);
    std::vector<float> r = ref.to_vector<float>(), v = to(y, kF32).to_vector<float>();
    for (size_t i = 0; i < r.size(); ++i)
      EXPECT_NEAR(v[i], r[i], (low == kBF16 ? 0.1 : 0.02) * std::max(1.0f, std::fabs(r[i])));
    sum(to(y, kF32)).backward();
    EXPECT_EQ(w.grad().dtype(), kF32);
    EXPECT_EQ(lw.grad().dtype(), kF32);
    EXPECT_EQ(lb.grad().dtype(), kF32);
  }
}
