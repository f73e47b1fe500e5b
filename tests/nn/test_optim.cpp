// Optimizers against reference updates written out in double in this file (PyTorch's formulas),
// the fused kernels against the composite version, state_dict round trips and errors,
// clip_grad_norm_, and the schedulers' learning-rate sequences.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "nn/clip.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"

using namespace loom;
using namespace loom::optim;
using Vec = std::vector<double>;

namespace {

// The gradient given to parameter k at step t (deterministic, varies with both).
Vec grad_values(size_t n, int k, int t) {
  Vec g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = std::sin(1.3 * double(i) + 0.7 * t + 2.1 * k) * (1.0 + 0.5 * k);
  return g;
}

// Two float64 parameters of different shapes with fixed starting values.
std::vector<Tensor> make_params(DType dt = kF64) {
  Tensor a = from_vector<double>({0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {2, 3}).to(dt);
  Tensor b = from_vector<double>({1.0, -2.0, 0.1, 3.0}, {4}).to(dt);
  a.requires_grad_(true);
  b.requires_grad_(true);
  a.set_name("a");
  b.set_name("b");
  return {a, b};
}

void set_grads(std::vector<Tensor>& ps, int t) {
  for (size_t k = 0; k < ps.size(); ++k)
    ps[k].set_grad(from_vector<double>(grad_values(size_t(ps[k].numel()), int(k), t), ps[k].shape())
                       .to(ps[k].dtype()));
}

void expect_close(const Tensor& t, const Vec& want, double tol) {
  Vec got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << "element " << i;
}

// ---- reference updates, one parameter at a time, in double ----

struct RefSGD {
  double lr, momentum, dampening, wd;
  bool nesterov;
  Vec buf;
  void step(Vec& p, const Vec& g) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (momentum != 0) {
        if (buf.size() < p.size())
          buf.push_back(d);  // first step: buf = d
        else
          buf[i] = momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

struct RefAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled, amsgrad;
  Vec m, v, vmax;
  int step = 0;
  void update(Vec& p, const Vec& g_in) {
    if (m.empty()) m = v = vmax = Vec(p.size(), 0.0);
    ++step;
    double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g_in[i];
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      double vh = amsgrad ? vmax[i] : v[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(vh) / std::sqrt(bc2) + eps);
    }
  }
};

}  // namespace

class OptimFused : public ::testing::TestWithParam<bool> {};

TEST_P(OptimFused, SGDMomentumNesterovWeightDecay) {
  auto ps = make_params();
  SGD opt(
      ps,
      {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .fused = GetParam()});
  std::vector<RefSGD> ref(2, RefSGD{0.1, 0.9, 0.0, 0.01, true, {}});
  std::vector<Vec> want{ps[0].to_vector<double>(), ps[1].to_vector<double>()};
  for (int t = 0; t < 3; ++t) {
    set_grads(ps, t);
    opt.step();
    for (int k = 0; k < 2; ++k) {
      ref[k].step(want[k], grad_values(want[k].size(), k, t));
      expect_close(ps[k], want[k], 1e-14);
      expect_close(opt.state(size_t(k)).buffers[0], ref[k].buf, 1e-14);
    }
  }
}

TEST_P(OptimFused, SGDDampenedMomentumAndPlain) {
  auto ps = make_params();
  SGD opt(ps, {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .fused = GetParam()});
  auto qs = make_params();
  SGD plain(qs, {.lr = 0.05, .fused = GetParam()});
  EXPECT_TRUE(plain.state_dict().size() == 6u);  // no per-parameter state, only the group
  std::vector<RefSGD> ref(2, RefSGD{0.05, 0.8, 0.3, 0.0, false, {}}),
      ref_plain(2, RefSGD{0.05, 0, 0, 0, false, {}});
  std::vector<Vec> want{ps[0].to_vector<double>(), ps[1].to_vector<double>()}, want_plain = want;
  for (int t = 0; t < 3; ++t) {
    set_grads(ps, t);
    set_grads(qs, t);
    opt.step();
    plain.step();
    for (int k = 0; k < 2; ++k) {
      ref[k].step(want[k], grad_values(want[k].size(), k, t));
      ref_plain[k].step(want_plain[k], grad_values(want[k].size(), k, t));
      expect_close(ps[k], want[k], 1e-14);
      expect_close(qs[k], want_plain[k], 1e-14);
    }
  }
}

TEST_P(OptimFused, Adam) {
  auto ps = make_params();
  Adam opt(
      ps,
      {.lr = 0.01, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = 0.1, .fused = GetParam()});
  std::vector<RefAdam> ref(2, RefAdam{0.01, 0.8, 0.95, 1e-6, 0.1, false, false, {}, {}, {}});
  std::vector<Vec> want{ps[0].to_vector<double>(), ps[1].to_vector<double>()};
  for (int t = 0; t < 3; ++t) {
    set_grads(ps, t);
    opt.step();
    for (int k = 0; k < 2; ++k) {
      ref[k].update(want[k], grad_values(want[k].size(), k, t));
      expect_close(ps[k], want[k], 1e-13);
      expect_close(opt.state(size_t(k)).buffers[0], ref[k].m, 1e-13);
      expect_close(opt.state(size_t(k)).buffers[1], ref[k].v, 1e-13);
      EXPECT_EQ(opt.state(size_t(k)).step, t + 1);
    }
  }
}

TEST_P(OptimFused, AdamWAndAmsgrad) {
  for (bool ams : {false, true}) {
    auto ps = make_params();
    AdamW opt(ps, {.lr = 0.02, .weight_decay = 0.05, .amsgrad = ams, .fused = GetParam()});
    EXPECT_EQ(opt.name(), "AdamW");
    std::vector<RefAdam> ref(2, RefAdam{0.02, 0.9, 0.999, 1e-8, 0.05, true, ams, {}, {}, {}});
    std::vector<Vec> want{ps[0].to_vector<double>(), ps[1].to_vector<double>()};
    for (int t = 0; t < 3; ++t) {
      set_grads(ps, t);
      // Shrink the gradients at step 2, so v falls and amsgrad's max matters.
      if (t == 2)
        for (auto& p : ps) {
          NoGradGuard g;
          p.grad().mul_(0.01);
        }
      opt.step();
      for (int k = 0; k < 2; ++k) {
        Vec gk = grad_values(want[k].size(), k, t);
        if (t == 2)
          for (double& x : gk) x *= 0.01;
        ref[k].update(want[k], gk);
        expect_close(ps[k], want[k], 1e-13);
        if (ams) expect_close(opt.state(size_t(k)).buffers[2], ref[k].vmax, 1e-13);
      }
    }
  }
  // AdamW's default weight decay is PyTorch's 1e-2.
  auto ps = make_params();
  AdamW w(ps);
  EXPECT_EQ(w.options().weight_decay, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(FusedAndComposite, OptimFused, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "fused" : "composite"; });

// The fused CPU kernels against the composite tensor-op version on larger float32 tensors.
TEST(Optim, FusedEqualsCompositeFloat32) {
  manual_seed(11);
  auto make = [] {
    manual_seed(11);
    return std::vector<Tensor>{randn({64, 33}).requires_grad_(), randn({33}).requires_grad_(),
                               randn({5, 4, 3, 3}).requires_grad_()};
  };
  auto run = [&](auto make_opt, std::vector<Tensor>& ps) {
    auto opt = make_opt(ps);
    for (int t = 0; t < 4; ++t) {
      manual_seed(100 + uint64_t(t));
      for (auto& p : ps) p.set_grad(randn(p.shape()));
      opt->step();
    }
  };
  auto compare = [&](auto make_fused, auto make_composite) {
    auto a = make(), b = make();
    run(make_fused, a);
    run(make_composite, b);
    for (size_t k = 0; k < a.size(); ++k) {
      auto x = a[k].to_vector<float>(), y = b[k].to_vector<float>();
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 2e-6f * (1 + std::abs(y[i])));
    }
  };
  compare(
      [](auto& ps) {
        return std::make_unique<Adam>(ps, AdamOptions{.weight_decay = 0.01, .amsgrad = true});
      },
      [](auto& ps) {
        return std::make_unique<Adam>(
            ps, AdamOptions{.weight_decay = 0.01, .amsgrad = true, .fused = false});
      });
  compare([](auto& ps) { return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 0.01}); },
          [](auto& ps) {
            return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 0.01, .fused = false});
          });
  compare(
      [](auto& ps) {
        return std::make_unique<SGD>(
            ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      },
      [](auto& ps) {
        return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1,
                                                    .momentum = 0.9,
                                                    .weight_decay = 1e-3,
                                                    .nesterov = true,
                                                    .fused = false});
      });
}

TEST(Optim, FusedKernelChecksItsArguments) {
  Tensor p = zeros({3}), g = zeros({4}), m = zeros({3}), v = zeros({3});
  EXPECT_THROW(backend_for(kCPU).adam_step({p}, {g}, {m}, {v}, {}, AdamStepParams{}), Error);
  EXPECT_THROW(backend_for(kCPU).adam_step({p}, {zeros({3})}, {m}, {}, {}, AdamStepParams{}),
               Error);
  EXPECT_THROW(backend_for(kCPU).sgd_step({p.to(kI64)}, {g.to(kI64)}, {}, SgdStepParams{}), Error);
}

TEST(Optim, SkipsParametersWithoutGradAndBucketsBySteps) {
  for (bool fused : {true, false}) {
    auto ps = make_params();
    Adam opt(ps, {.lr = 0.1, .fused = fused});
    std::vector<RefAdam> ref(2, RefAdam{0.1, 0.9, 0.999, 1e-8, 0.0, false, false, {}, {}, {}});
    std::vector<Vec> want{ps[0].to_vector<double>(), ps[1].to_vector<double>()};
    for (int t = 0; t < 3; ++t) {
      set_grads(ps, t);
      if (t == 0) ps[1].set_grad(Tensor());  // b has no gradient at step 0: it is left alone
      opt.step();
      for (int k = 0; k < 2; ++k) {
        if (t == 0 && k == 1) {
          EXPECT_FALSE(opt.state(1).initialized());
          expect_close(ps[1], want[1], 0);
          continue;
        }
        ref[k].update(want[k], grad_values(want[k].size(), k, t));
        expect_close(ps[k], want[k], 1e-13);
      }
    }
    EXPECT_EQ(opt.state(0).step, 3);
    EXPECT_EQ(opt.state(1).step, 2);
  }
}

TEST(Optim, ZeroGradAndLearningRate) {
  auto ps = make_params();
  SGD opt(ps, {.lr = 0.3});
  set_grads(ps, 0);
  opt.zero_grad();
  for (auto& p : ps) EXPECT_FALSE(p.grad().defined());
  opt.add_param_group({from_vector<double>({1.0}, {1}, true)}, {.lr = 0.7});
  EXPECT_EQ(opt.num_param_groups(), 2u);
  EXPECT_EQ(opt.lr(1), 0.7);
  opt.set_lr(0.2);
  EXPECT_EQ(opt.lr(0), 0.2);
  EXPECT_EQ(opt.lr(1), 0.2);
  EXPECT_THROW(opt.lr(2), Error);
  EXPECT_THROW(opt.add_param_group({ps[0]}, {}), Error);  // already optimised
  EXPECT_THROW(SGD(ps, {.momentum = 0.0, .nesterov = true}), Error);
  EXPECT_THROW(Adam(ps, {.betas = {1.0, 0.9}}), Error);
  // A gradient of the wrong shape names the parameter.
  ps[0].set_grad(Tensor());
  ps[0].ensure_autograd_meta().grad = zeros({3}, {.dtype = kF64});
  try {
    opt.step();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"a\""), std::string::npos) << e.what();
  }
}

TEST(Optim, StateDictLayoutAndRoundTripContinuesIdentically) {
  for (bool ams : {false, true}) {
    auto ps = make_params();
    Adam a(ps, {.lr = 0.01, .amsgrad = ams});
    for (int t = 0; t < 2; ++t) {
      set_grads(ps, t);
      a.step();
    }
    StateDict sd = a.state_dict();
    std::vector<std::string> want{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"};
    if (ams) want.push_back("state.0.max_exp_avg_sq");
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(sd[i].first, want[i]);
    EXPECT_EQ(nn::find(sd, "state.0.step")->item(), 2.0);
    EXPECT_EQ(nn::find(sd, "state.0.step")->dtype(), kF64);
    EXPECT_EQ(nn::find(sd, "state.1.exp_avg")->shape(), (Shape{4}));
    EXPECT_EQ(nn::find(sd, "param_groups.0.params")->to_vector<int64_t>(),
              (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(nn::find(sd, "param_groups.0.lr")->item(), 0.01);
    EXPECT_EQ(nn::find(sd, "param_groups.0.beta2")->item(), 0.999);
    EXPECT_EQ(nn::find(sd, "param_groups.0.amsgrad")->item(), ams ? 1.0 : 0.0);

    // A fresh optimizer over copies of the parameters, loaded from sd, continues identically.
    auto qs = make_params();
    for (size_t k = 0; k < 2; ++k) {
      NoGradGuard g;
      qs[k].copy_(ps[k]);
    }
    Adam b(qs, {.lr = 0.5, .amsgrad = ams});
    StateDict copy;  // deep copy, so a's further steps cannot leak into b through shared storage
    for (auto& [n, t] : sd) copy.emplace_back(n, t.clone());
    b.load_state_dict(copy);
    EXPECT_EQ(b.lr(), 0.01);
    EXPECT_EQ(b.state(0).step, 2);
    for (int t = 2; t < 5; ++t) {
      set_grads(ps, t);
      set_grads(qs, t);
      a.step();
      b.step();
    }
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(ps[k].to_vector<double>(), qs[k].to_vector<double>());
  }
}

TEST(Optim, SGDStateDictRoundTrip) {
  auto ps = make_params();
  SGD a(ps, {.lr = 0.1, .momentum = 0.9});
  set_grads(ps, 0);
  a.step();
  StateDict sd = a.state_dict();
  EXPECT_EQ(sd[0].first, "state.0.momentum_buffer");  // SGD keeps no step count
  auto qs = make_params();
  for (size_t k = 0; k < 2; ++k) {
    NoGradGuard g;
    qs[k].copy_(ps[k]);
  }
  SGD b(qs, {.lr = 0.1, .momentum = 0.9});
  b.load_state_dict(sd);
  for (int t = 1; t < 3; ++t) {
    set_grads(ps, t);
    set_grads(qs, t);
    a.step();
    b.step();
  }
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(ps[k].to_vector<double>(), qs[k].to_vector<double>());
}

TEST(Optim, LoadStateDictListsEveryProblem) {
  auto ps = make_params();
  Adam a(ps);
  set_grads(ps, 0);
  a.step();
  StateDict sd = a.state_dict();
  StateDict bad;
  for (auto& [n, t] : sd) {
    if (n == "state.1.exp_avg_sq" || n == "param_groups.0.eps") continue;  // missing
    bad.emplace_back(n, n == "state.0.exp_avg" ? zeros({3, 2}, {.dtype = kF64}) : t);
  }
  bad.emplace_back("state.7.exp_avg", zeros({1}));
  bad.emplace_back("state.0.momentum_buffer", zeros({2, 3}));
  auto before = a.state(0).buffers[0].to_vector<double>();
  try {
    a.load_state_dict(bad);
    ADD_FAILURE();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const char* s : {"missing \"state.1.exp_avg_sq\"", "missing \"param_groups.0.eps\"",
                          "\"state.0.exp_avg\" has shape [3, 2], parameter \"a\" has [2, 3]",
                          "unexpected (or duplicated) entry \"state.7.exp_avg\"",
                          "unexpected (or duplicated) entry \"state.0.momentum_buffer\""})
      EXPECT_NE(msg.find(s), std::string::npos) << "missing \"" << s << "\" in: " << msg;
  }
  EXPECT_EQ(a.state(0).buffers[0].to_vector<double>(), before);  // nothing changed
  // Another optimizer's parameter list does not fit.
  auto more = make_params();
  more.push_back(from_vector<double>({1.0}, {1}, true));
  Adam c(more);
  EXPECT_THROW(c.load_state_dict(sd), Error);
}

TEST(Optim, ModelParametersTrain) {
  // A linear model fit by Adam: the loss falls (the pieces work together).
  manual_seed(12);
  auto fc = std::make_shared<nn::Linear>(3, 1);
  Tensor x = randn({64, 3});
  Tensor y = x.matmul(from_vector<float>({1.0f, -2.0f, 0.5f}, {3, 1})) + 0.3f;
  Adam opt(fc->parameters(), {.lr = 0.05});
  double first = 0, last = 0;
  for (int t = 0; t < 200; ++t) {
    opt.zero_grad();
    Tensor loss = mse_loss(fc->forward(x), y);
    loss.backward();
    opt.step();
    (t == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first * 1e-3);
}

TEST(Clip, GradNormScalesWhenAboveMax) {
  auto ps = make_params();
  set_grads(ps, 0);
  Vec g0 = ps[0].grad().to_vector<double>(), g1 = ps[1].grad().to_vector<double>();
  double ss = 0, mx = 0;
  for (double v : g0) ss += v * v, mx = std::max(mx, std::abs(v));
  for (double v : g1) ss += v * v, mx = std::max(mx, std::abs(v));
  double total = std::sqrt(ss);
  Tensor t = nn::clip_grad_norm_(ps, 1.0);
  EXPECT_NEAR(t.item(), total, 1e-12);
  ASSERT_GT(total, 1.0);
  double c = 1.0 / (total + 1e-6);
  Vec w0 = g0;
  for (double& v : w0) v *= c;
  expect_close(ps[0].grad(), w0, 1e-14);
  // Now the norm is about 1: below a max of 10 nothing changes.
  Vec before = ps[1].grad().to_vector<double>();
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 10.0).item(), 1.0, 1e-5);
  EXPECT_EQ(ps[1].grad().to_vector<double>(), before);
  // Infinity norm and a 1-norm.
  set_grads(ps, 0);
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0, nn::kInfNorm).item(), mx, 1e-14);
  double l1 = 0;
  for (double v : g0) l1 += std::abs(v);
  for (double v : g1) l1 += std::abs(v);
  EXPECT_NEAR(nn::clip_grad_norm_(ps, 100.0, 1.0).item(), l1, 1e-12);
  // Non-finite.
  ps[0].set_grad(full({2, 3}, NAN, {.dtype = kF64}));
  EXPECT_THROW(nn::clip_grad_norm_(ps, 1.0, 2.0, true), Error);
}

TEST(Scheduler, StepLRSequence) {
  auto ps = make_params();
  SGD opt(ps, {.lr = 0.1});
  opt.add_param_group({from_vector<double>({1.0}, {1}, true)}, {.lr = 1.0});
  StepLR s(opt, 3, 0.5);
  for (int e = 0; e < 10; ++e) {
    double f = std::pow(0.5, e / 3);
    EXPECT_DOUBLE_EQ(opt.lr(0), 0.1 * f) << e;
    EXPECT_DOUBLE_EQ(opt.lr(1), 1.0 * f) << e;
    EXPECT_EQ(s.last_epoch(), e);
    s.step();
  }
}

TEST(Scheduler, CosineWithWarmupSequenceAndState) {
  auto ps = make_params();
  Adam opt(ps, {.lr = 0.2});
  CosineWithWarmupOptions o{
      .warmup_steps = 4, .total_steps = 12, .eta_min = 0.01, .warmup_start_factor = 0.1};
  CosineWithWarmup s(opt, o);
  auto expected = [&](int t) {
    if (t < 4) return 0.2 * (0.1 + 0.9 * t / 4.0);
    double prog = std::min(1.0, (t - 4) / 8.0);
    return 0.01 + (0.2 - 0.01) * 0.5 * (1 + std::cos(std::numbers::pi * prog));
  };
  std::vector<double> seen;
  for (int t = 0; t < 15; ++t) {
    EXPECT_NEAR(opt.lr(), expected(t), 1e-15) << t;
    EXPECT_NEAR(s.get_lr()[0], expected(t), 1e-15) << t;
    seen.push_back(opt.lr());
    s.step();
  }
  EXPECT_NEAR(seen[4], 0.2, 1e-15);    // the peak, right after warmup
  EXPECT_NEAR(seen[12], 0.01, 1e-15);  // eta_min at total_steps, and after
  EXPECT_NEAR(seen[14], 0.01, 1e-15);

  // Saved and restored mid-way, a new scheduler continues the same sequence.
  auto qs = make_params();
  Adam opt2(qs, {.lr = 0.2});
  StateDict sd;
  {
    auto ps3 = make_params();
    Adam opt3(ps3, {.lr = 0.2});
    CosineWithWarmup s3(opt3, o);
    for (int t = 0; t < 6; ++t) s3.step();
    sd = s3.state_dict();
  }
  EXPECT_EQ(nn::find(sd, "last_epoch")->item(), 6.0);
  CosineWithWarmup s2(opt2, o);
  s2.load_state_dict(sd);
  s2.step();
  EXPECT_NEAR(opt2.lr(), expected(7), 1e-15);
  EXPECT_THROW(CosineWithWarmup(opt2, {.warmup_steps = 5, .total_steps = 5}), Error);
}
