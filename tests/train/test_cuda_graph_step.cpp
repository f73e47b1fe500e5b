// --cuda-graph: a training step replayed as a CUDA graph computes what the eager step computes
// (same losses, same weights after several steps), for the MLP and for the CNN with BatchNorm.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

bool have_gpu() { return cuda::is_available(); }

// Runs `steps` steps on fixed random batches; returns the losses and the final parameters.
std::pair<std::vector<double>, std::vector<std::vector<float>>> run_steps(bool cnn, bool graph, int steps) {
  manual_seed(3);
  std::shared_ptr<nn::Module> model = cnn ? std::shared_ptr<nn::Module>(nn::make_cnn()) : nn::make_mlp(256);
  Device dev = cuda_device(0);
  model->to(dev);
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  train::StepRunner runner(*model, opt, 0.0, graph);
  std::vector<double> losses;
  Generator gen(11);
  for (int i = 0; i < steps; ++i) {
    Tensor x = randn({32, 1, 28, 28}, {.device = dev}, &gen);
    Tensor y = randint(0, 10, {32}, {.dtype = kI64, .device = dev}, &gen);
    losses.push_back(runner.step(x, y).item());
  }
  std::vector<std::vector<float>> params;
  for (auto& p : model->parameters()) params.push_back(p.to_vector<float>());
  return {losses, params};
}

// Tolerances: the MLP's kernels are deterministic, so eager and graph agree to float32 rounding
// (1e-5). cuDNN's weight-gradient algorithms may sum with atomics, so two runs of the CNN differ
// in the last bits even without graphs; over 6 Adam steps that grew to 5e-5 relative on an H200.
void expect_same(bool cnn) {
  const double tol = cnn ? 3e-4 : 1e-5;
  auto [le, pe] = run_steps(cnn, false, 6);
  auto [lg, pg] = run_steps(cnn, true, 6);
  for (size_t i = 0; i < le.size(); ++i) EXPECT_NEAR(lg[i], le[i], tol * std::max(1.0, std::fabs(le[i]))) << "step " << i;
  ASSERT_EQ(pe.size(), pg.size());
  for (size_t k = 0; k < pe.size(); ++k)
    for (size_t j = 0; j < pe[k].size(); ++j) ASSERT_NEAR(pg[k][j], pe[k][j], tol) << "param " << k << " element " << j;
}

}  // namespace

TEST(CudaGraphStep, MlpMatchesEager) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_same(false);
}

TEST(CudaGraphStep, CnnWithBatchNormMatchesEager) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  expect_same(true);
}

TEST(CudaGraphStep, CpuDeviceIsRejected) {
  manual_seed(0);
  auto model = nn::make_mlp(8);
  optim::Adam opt(model->parameters());
  train::StepRunner runner(*model, opt, 0.0, true);
  Tensor x = randn({2, 1, 28, 28});
  Tensor y = randint(0, 10, {2});
  EXPECT_THROW(runner.step(x, y), Error);
}
