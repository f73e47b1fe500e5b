// CosineWithWarmup's warm-up (nn/optim/lr_scheduler.h) seen through the steps an optimizer takes:
// plain SGD on a parameter whose gradient is always 1 moves it by exactly the rate of each step,
// so the moves are the schedule, per group, against hand-computed values.
// Leaves out: the formulas' full sequence, StepLR and the saved state (tests/nn/test_optim.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "autograd/ops/ops.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"

using namespace loom;
using namespace loom::optim;

namespace {

// The distance each of `steps` SGD steps moves a parameter of each group (gradient 1, float64:
// the moves are exact to the rounding of positions below 2, a few 1e-16, hence 1e-15 below).
std::vector<std::vector<double>> moves(const std::vector<double>& base_lrs,
                                       CosineWithWarmupOptions o, int steps) {
  std::vector<Tensor> ps;
  for (size_t g = 0; g < base_lrs.size(); ++g)
    ps.push_back(zeros({1}, {.dtype = kF64}).requires_grad_(true));
  SGD opt({ps[0]}, {.lr = base_lrs[0]});
  for (size_t g = 1; g < ps.size(); ++g) opt.add_param_group({ps[g]}, {.lr = base_lrs[g]});
  CosineWithWarmup sched(opt, o);
  std::vector<std::vector<double>> out(ps.size());
  for (int t = 0; t < steps; ++t) {
    std::vector<double> before;
    for (Tensor& p : ps) {
      before.push_back(p.item());
      p.set_grad(ones({1}, {.dtype = kF64}));
    }
    opt.step();
    sched.step();
    for (size_t g = 0; g < ps.size(); ++g) out[g].push_back(before[g] - ps[g].item());
  }
  return out;
}

}  // namespace

// Warm-up over 5 steps from 0 (the default start factor): step t moves by base * t / 5, so the
// first step does not move at all, then the peak at step 5 and the cosine after it:
// base * (1 + cos(pi / 10)) / 2 = base * 0.97552825814757682 at step 6 (total 15, eta_min 0).
TEST(CosineWithWarmup, AnOptimizerStepsAtTheWarmUpRatesFromZero) {
  const auto m = moves({0.4, 0.1}, {.warmup_steps = 5, .total_steps = 15}, 7);
  const std::vector<double> want0{0.0, 0.08, 0.16, 0.24, 0.32, 0.4, 0.4 * 0.97552825814757682};
  const std::vector<double> want1{0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.1 * 0.97552825814757682};
  for (size_t t = 0; t < want0.size(); ++t) {
    EXPECT_NEAR(m[0][t], want0[t], 1e-15) << "group 0, step " << t;
    EXPECT_NEAR(m[1][t], want1[t], 1e-15) << "group 1, step " << t;
  }
}

// One warm-up step with start factor 0.5: half the rate at step 0, the peak at step 1, and from
// total_steps = 3 on eta_min = 0.01 (the cosine at step 2: 0.01 + 0.19 * (1 + cos(pi / 2)) / 2).
TEST(CosineWithWarmup, OneWarmUpStepStartsAtTheStartFactor) {
  const auto m = moves(
      {0.2}, {.warmup_steps = 1, .total_steps = 3, .eta_min = 0.01, .warmup_start_factor = 0.5}, 5);
  const std::vector<double> want{0.1, 0.2, 0.105, 0.01, 0.01};
  for (size_t t = 0; t < want.size(); ++t) EXPECT_NEAR(m[0][t], want[t], 1e-15) << "step " << t;
}
