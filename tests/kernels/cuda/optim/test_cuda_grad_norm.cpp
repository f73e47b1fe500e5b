// The fused gradient norm on CUDA (kernels/cuda/optim/cuda_grad_norm.cu) against the CPU's: the sum
// of squares of many tensors (chunks of 8192 across tensor boundaries, a table of more than 512
// tensors, which takes two launches) in float32 and float64, the same bits on every run; scale_by_
// bit for bit; clip_grad_norm_ on the GPU against the CPU; the clip inside fused AdamW's update
// (Note [Clipping inside the update]) bit for bit against the clip followed by the update.
#include <gtest/gtest.h>

#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "nn/clip.h"
#include "nn/optim/adam.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {
const Device kGpu = cuda_device(0);
}  // namespace

TEST(CudaGradNorm, MatchesCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(41);
  for (DType dt : {kF32, kF64}) {
    std::vector<Tensor> cpu, gpu;
    for (int i = 0; i < 600; ++i) {  // 600 tensors: two tables
      const int64_t n = i % 50 == 0 ? 20000 : 1 + (i * 37) % 300;
      cpu.push_back(randn({n}, {.dtype = dt}, &gen));
      gpu.push_back(cpu.back().to(kGpu));
    }
    const double want = backend_for(kCPU).sum_of_squares(cpu).to(kF64).item();
    Tensor got = backend_for(kGpu).sum_of_squares(gpu);
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_NEAR(got.to(kF64).item(), want, (dt == kF32 ? 1e-6 : 1e-13) * want);
    for (int run = 0; run < 3; ++run)  // deterministic: the same bits
      EXPECT_EQ(backend_for(kGpu).sum_of_squares(gpu).to(kF64).item(), got.to(kF64).item());
    Tensor f = full({}, 0.37, {.dtype = dt});
    backend_for(kCPU).scale_by_(cpu, f);
    backend_for(kGpu).scale_by_(gpu, f.to(kGpu));
    for (size_t i = 0; i < cpu.size(); i += 7) EXPECT_TRUE(all_equal(cpu[i], gpu[i].to(kCPU)));
  }
  // clip_grad_norm_ on the GPU (fused) against the CPU (fused) and the composite.
  std::vector<Tensor> pc, pg;
  for (int64_t n : {5, 9000, 70000}) {
    Tensor p = randn({n}, {}, &gen).requires_grad_(true);
    p.set_grad(randn({n}, {}, &gen));
    Tensor q = p.detach().to(kGpu).requires_grad_(true);
    q.set_grad(p.grad().to(kGpu));
    pc.push_back(p);
    pg.push_back(q);
  }
  const double tc = nn::clip_grad_norm_(pc, 1.0).item(), tg = nn::clip_grad_norm_(pg, 1.0).item();
  EXPECT_NEAR(tg, tc, 1e-5 * tc);
  for (size_t i = 0; i < pc.size(); ++i)
    EXPECT_TRUE(all_close(pc[i].grad(), pg[i].grad().to(kCPU), 1e-6));
}

TEST(CudaGradNorm, ClipInsideAdamWEqualsTheClipThenTheUpdateBitForBit) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(43);
  for (DType dt : {kF32, kF64}) {
    std::vector<Tensor> a, b;
    for (int64_t n : {5, 9000, 70001}) {
      Tensor p = randn({n}, {.dtype = dt}, &gen).to(kGpu).requires_grad_(true);
      Tensor q = p.detach().clone().requires_grad_(true);
      a.push_back(p);
      b.push_back(q);
    }
    optim::AdamW oa(a, {.lr = 0.1, .weight_decay = 0.1}), ob(b, {.lr = 0.1, .weight_decay = 0.1});
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        Tensor g = randn(a[i].shape(), {.dtype = dt}, &gen).to(kGpu) * 10.0;  // clipped
        a[i].set_grad(g);
        b[i].set_grad(g.clone());
      }
      Tensor ta = nn::clip_grad_norm_(a, 1.0);
      oa.step();
      Tensor tb = ob.clip_grad_norm_in_step(1.0);
      EXPECT_GT(tb.item(), 2.0);
      ob.step();
      EXPECT_EQ(ta.item(), tb.item());
    }
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(all_equal(a[i].detach().to(kCPU), b[i].detach().to(kCPU))) << dtype_name(dt) << i;
  }
}
