// fp16 training with a GradScaler, eager against a replayed CUDA graph: the same sequence of
// loss scales and skipped steps (an initial scale so large that the first steps overflow), and
// losses that agree. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/amp/grad_scaler.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

struct Decisions {
  std::vector<double> scales, losses;
  std::vector<int64_t> skipped;
};

Decisions run(bool graph) {
  manual_seed(3);
  auto model = nn::make_mlp(256);
  nn::fuse(*model);  // the fused Linear + ReLU, as the examples and benchmarks run it
  Device dev = cuda_device(0);
  model->to(dev);
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  train::StepRunner runner(*model, opt, 0.0, graph);
  // 2^40: the f16 backward overflows until the scale has backed off far enough.
  amp::GradScaler scaler({.init_scale = 1099511627776.0, .growth_interval = 4});
  runner.set_amp(kF16, &scaler);
  Decisions d;
  Generator gen(11);
  for (int i = 0; i < 40; ++i) {
    Tensor x = randn({32, 1, 28, 28}, {.device = dev}, &gen);
    Tensor y = randint(0, 10, {32}, {.dtype = kI64, .device = dev}, &gen);
    d.losses.push_back(runner.step(x, y).item());
    d.scales.push_back(scaler.get_scale());
    d.skipped.push_back(scaler.skipped_steps());
  }
  return d;
}

}  // namespace

TEST(CudaAmpGraph, Fp16ScaleAndSkipDecisionsMatchEagerUnderReplay) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Decisions eager = run(false), graph = run(true);
  EXPECT_GT(eager.skipped.back(), 0) << "the huge initial scale must overflow at first";
  EXPECT_LT(eager.skipped.back(), 40) << "and the scale must come down to where steps go through";
  EXPECT_EQ(graph.scales, eager.scales);
  EXPECT_EQ(graph.skipped, eager.skipped);
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_NEAR(graph.losses[i], eager.losses[i], 1e-3 * std::max(1.0, std::fabs(eager.losses[i])))
        << "step " << i;
}
