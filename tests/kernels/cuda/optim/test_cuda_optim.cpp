// The CUDA multi-tensor optimizer kernels (Backend::adam_step / sgd_step) against the CPU ones:
// many tensors of mixed sizes (empty ones, ones spanning many chunks, more tensors than one
// kernel's table holds), float32 and float64, and the Adam/SGD optimizers end to end on the GPU.
// Skipped without a GPU; compiles to nothing without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <tuple>
#include <utility>

#include "autograd/ops/ops.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_backend.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "nn/optim/in_backward.h"
#include "nn/optim/sgd.h"
#include "support/cuda_test_util.h"

using namespace loom;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

// Sizes: tiny, empty, multi-chunk (chunks are 4096 elements), odd.
std::vector<int64_t> sizes(int count) {
  std::vector<int64_t> s;
  for (int i = 0; i < count; ++i)
    s.push_back(i % 7 == 3 ? 0 : (i % 11 == 0 ? 10000 + 37 * i : 1 + (i * 131) % 600));
  return s;
}

std::vector<Tensor> random_list(const std::vector<int64_t>& n, DType dt, uint64_t seed,
                                double scale = 1.0, bool positive = false) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (int64_t k : n) {
    Tensor t = randn({k}, {.dtype = kF64}, &gen) * scale;
    if (positive) t = t * t;
    out.push_back(t.to(dt));
  }
  return out;
}

// Every third tensor is placed one element into a larger buffer: contiguous but not 16-byte
// aligned, so the kernels' scalar path runs beside the vector one.
std::vector<Tensor> to_gpu(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 3 != 1) {
      out.push_back(v[i].to(cuda_device(0)));
      continue;
    }
    int64_t n = v[i].numel();
    Tensor shifted =
        empty({n + 1}, {.dtype = v[i].dtype(), .device = cuda_device(0)}).slice(0, 1, n + 1);
    shifted.copy_(v[i]);
    out.push_back(shifted);
  }
  return out;
}

void expect_lists_close(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu, double tol,
                        const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t k = 0; k < cpu.size(); ++k) {
    auto a = gpu[k].to_vector<double>(), b = cpu[k].to_vector<double>();
    for (size_t i = 0; i < b.size(); ++i)
      ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i])))
          << what << " tensor " << k << " element " << i;
  }
}

// A random batch on cuda:0 shaped like Fashion-MNIST's: 64 images (64, 1, 28, 28), 64 labels.
std::pair<Tensor, Tensor> image_batch(uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({64, 1, 28, 28}, {.device = cuda_device(0)}, &gen);
  Tensor y = randint(0, 10, {64}, {.dtype = kI64, .device = cuda_device(0)}, &gen);
  return {x, y};
}

}  // namespace

class CudaOptim : public ::testing::TestWithParam<DType> {};

TEST_P(CudaOptim, AdamStepMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  DType dt = GetParam();
  double tol = dt == kF64 ? 1e-13 : 2e-6;
  for (bool amsgrad : {false, true}) {
    auto n = sizes(300);  // more than one table (256 tensors)
    auto p = random_list(n, dt, 1), g = random_list(n, dt, 2), m = random_list(n, dt, 3, 0.1),
         v = random_list(n, dt, 4, 0.1, true), vm = random_list(n, dt, 5, 0.1, true);
    auto P = to_gpu(p), G = to_gpu(g), M = to_gpu(m), V = to_gpu(v), VM = to_gpu(vm);
    for (int step = 1; step <= 3; ++step) {
      AdamStepParams hp;
      hp.lr = 0.01, hp.weight_decay = 0.05, hp.decoupled_weight_decay = step % 2 == 0,
      hp.amsgrad = amsgrad;
      hp.step = step;
      backend_for(kCPU).adam_step(p, g, m, v, amsgrad ? vm : std::vector<Tensor>{}, hp);
      backend_for(cuda_device(0)).adam_step(P, G, M, V, amsgrad ? VM : std::vector<Tensor>{}, hp);
    }
    expect_lists_close(P, p, tol, "param");
    expect_lists_close(M, m, tol, "exp_avg");
    expect_lists_close(V, v, tol, "exp_avg_sq");
    if (amsgrad) expect_lists_close(VM, vm, tol, "max_exp_avg_sq");
  }
}

TEST_P(CudaOptim, SgdStepMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  DType dt = GetParam();
  double tol = dt == kF64 ? 1e-13 : 2e-6;
  for (double momentum : {0.0, 0.9}) {
    auto n = sizes(270);
    auto p = random_list(n, dt, 6), g = random_list(n, dt, 7), b = random_list(n, dt, 8);
    auto P = to_gpu(p), G = to_gpu(g), B = to_gpu(b);
    for (int step = 0; step < 3; ++step) {
      SgdStepParams hp;
      hp.lr = 0.1, hp.momentum = momentum, hp.weight_decay = 1e-3,
      hp.nesterov = momentum > 0 && step == 2;
      hp.dampening = step == 1 ? 0.2 : 0.0, hp.first_step = step == 0;
      std::vector<Tensor> none;
      backend_for(kCPU).sgd_step(p, g, momentum > 0 ? b : none, hp);
      backend_for(cuda_device(0)).sgd_step(P, G, momentum > 0 ? B : none, hp);
    }
    expect_lists_close(P, p, tol, "param");
    if (momentum > 0) expect_lists_close(B, b, tol, "momentum_buffer");
  }
}

// Note [Step scalars on the device]: the kernels read lr and step from device memory, count the
// update after every table (300 tensors: two tables, one count), and skip on the flag; the CPU
// loop does the same with host memory. Both against the host-scalar CPU step.
TEST_P(CudaOptim, DeviceStepScalarsMatchHostScalarsAndSkipOnTheFlag) {
  SKIP_WITHOUT_CUDA();
  DType dt = GetParam();
  double tol = dt == kF64 ? 1e-13 : 2e-6;
  const Device gpu = cuda_device(0);
  auto n = sizes(300);
  auto p = random_list(n, dt, 11), g = random_list(n, dt, 12), m = random_list(n, dt, 13, 0.1),
       v = random_list(n, dt, 14, 0.1, true);
  auto P = to_gpu(p), G = to_gpu(g), M = to_gpu(m), V = to_gpu(v);
  auto p2 = random_list(n, dt, 11), m2 = random_list(n, dt, 13, 0.1),
       v2 = random_list(n, dt, 14, 0.1, true);  // the CPU device-scalar run
  DeviceStepScalars on_gpu{full({1}, 0.02, {.dtype = kF64, .device = gpu}),
                           full({1}, 4.0, {.dtype = kF64, .device = gpu}),
                           zeros({1}, {.device = gpu})};
  DeviceStepScalars on_cpu{full({1}, 0.02, {.dtype = kF64}), full({1}, 4.0, {.dtype = kF64}),
                           zeros({1})};
  int64_t host_step = 4;
  for (int call = 0; call < 4; ++call) {
    const bool skip = call == 1;  // a skipped update: nothing changes, the count stays
    if (!skip) ++host_step;
    AdamStepParams hp;
    hp.lr = 0.02, hp.weight_decay = 0.05, hp.decoupled_weight_decay = true, hp.step = host_step;
    if (!skip) backend_for(kCPU).adam_step(p, g, m, v, {}, hp);
    on_gpu.skip_if.fill_(skip ? 1.0 : 0.0);
    on_cpu.skip_if.fill_(skip ? 1.0 : 0.0);
    AdamStepParams dev = hp;
    dev.lr = 99.0, dev.step = 99;  // ignored with device scalars
    dev.on_device = on_gpu;
    backend_for(gpu).adam_step(P, G, M, V, {}, dev);
    dev.on_device = on_cpu;
    backend_for(kCPU).adam_step(p2, g, m2, v2, {}, dev);
  }
  EXPECT_EQ(on_gpu.step.item(), 7.0);  // 4 + three updates, one skipped
  EXPECT_EQ(on_cpu.step.item(), 7.0);
  expect_lists_close(P, p, tol, "param (CUDA, device scalars)");
  expect_lists_close(M, m, tol, "exp_avg (CUDA, device scalars)");
  expect_lists_close(V, v, tol, "exp_avg_sq (CUDA, device scalars)");
  expect_lists_close(p2, p, 0.0, "param (CPU, device scalars)");
  // SGD: step 0 on the device takes the first-step rule (buf = d_p), then the usual one.
  auto sp = random_list(n, dt, 15), sg = random_list(n, dt, 16), sb = random_list(n, dt, 17);
  auto SP = to_gpu(sp), SG = to_gpu(sg), SB = to_gpu(sb);
  DeviceStepScalars sgd_gpu{full({1}, 0.1, {.dtype = kF64, .device = gpu}),
                            zeros({1}, {.dtype = kF64, .device = gpu}), Tensor()};
  for (int step = 0; step < 3; ++step) {
    SgdStepParams hp;
    hp.lr = 0.1, hp.momentum = 0.9, hp.dampening = 0.3, hp.first_step = step == 0;
    backend_for(kCPU).sgd_step(sp, sg, sb, hp);
    hp.first_step = false, hp.lr = 7.0, hp.on_device = sgd_gpu;
    backend_for(gpu).sgd_step(SP, SG, SB, hp);
  }
  EXPECT_EQ(sgd_gpu.step.item(), 3.0);
  expect_lists_close(SP, sp, tol, "sgd param (CUDA, device scalars)");
  expect_lists_close(SB, sb, tol, "sgd momentum_buffer (CUDA, device scalars)");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOptim, ::testing::Values(kF32, kF64),
                         [](const auto& info) { return info.param == kF32 ? "f32" : "f64"; });

TEST(CudaOptim, ChecksArguments) {
  SKIP_WITHOUT_CUDA();
  Tensor p = zeros({3}, {.device = cuda_device(0)}), g = zeros({3});  // gradient on the CPU
  EXPECT_THROW(backend_for(cuda_device(0)).sgd_step({p}, {g}, {}, SgdStepParams{}), Error);
}

TEST(CudaOptim, OptimizersTrainTheSameOnGpuAndCpu) {
  SKIP_WITHOUT_CUDA();
  auto run = [](Device dev, bool adam) {
    manual_seed(21);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32),
                                                  std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, 3));
    model->to(dev);
    std::unique_ptr<optim::Optimizer> opt;
    if (adam)
      opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 0.01});
    else
      opt = std::make_unique<optim::SGD>(
          model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    Generator gen(5);
    Tensor x = randn({16, 6}, {}, &gen).to(dev), y = randn({16, 3}, {}, &gen).to(dev);
    for (int t = 0; t < 5; ++t) {
      opt->zero_grad();
      mse_loss(model->forward(x), y).backward();
      opt->step();
    }
    return model->state_dict();
  };
  for (bool adam : {true, false}) {
    auto cpu = run(kCPU, adam), gpu = run(cuda_device(0), adam);
    for (size_t i = 0; i < cpu.size(); ++i) {
      auto a = gpu[i].second.to_vector<double>(), b = cpu[i].second.to_vector<double>();
      for (size_t j = 0; j < b.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-4) << cpu[i].first;
    }
  }
}

// Timing, not a check (run with --gtest_also_run_disabled_tests): one Adam step over the
// parameters of the mlp and wide workloads (docs/workloads.md), fused against composite.
TEST(CudaOptim, DISABLED_TimeAdamStep) {
  SKIP_WITHOUT_CUDA();
  auto layers = [](std::vector<std::pair<int64_t, int64_t>> dims) {
    std::vector<Shape> s;
    for (auto [in, out] : dims) s.push_back({out, in}), s.push_back({out});
    return s;
  };
  std::vector<std::pair<int64_t, int64_t>> wide{{784, 4096}};
  for (int i = 0; i < 7; ++i) wide.push_back({4096, 4096});
  wide.push_back({4096, 10});
  std::vector<std::pair<const char*, std::vector<Shape>>> models{
      {"mlp", layers({{784, 1024}, {1024, 1024}, {1024, 10}})}, {"wide", layers(wide)}};
  for (auto& [name, shapes] : models) {
    for (bool fused : {true, false}) {
      std::vector<Tensor> ps;
      int64_t count = 0;
      for (auto& s : shapes) {
        ps.push_back(randn(s, {.device = cuda_device(0)}).requires_grad_());
        ps.back().set_grad(randn(s, {.device = cuda_device(0)}));
        count += ps.back().numel();
      }
      optim::Adam opt(ps, {.fused = fused});
      for (int i = 0; i < 3; ++i) opt.step();
      cuda::synchronize(0);
      auto t0 = std::chrono::steady_clock::now();
      const int n = 20;
      for (int i = 0; i < n; ++i) opt.step();
      cuda::synchronize(0);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          n;
      std::printf(
          "adam step %-4s (%zu tensors, %.1f M params) %-9s %8.3f ms  (%.0f GB/s of "
          "param+grad+state traffic)\n",
          name, ps.size(), double(count) / 1e6, fused ? "fused" : "composite", ms,
          double(count) * 4 * 7 / (ms * 1e6));
    }
  }
}

// Module::to(cuda) moves parameters in place: an optimizer built on the CPU parameters updates the
// moved ones on the GPU, by exactly the CPU model's update.
TEST(CudaOptim, OptimizerBuiltBeforeToFollowsTheModelToTheGpu) {
  SKIP_WITHOUT_CUDA();
  manual_seed(3);
  auto gpu = nn::make<nn::Linear>(4, 2);
  auto cpu = nn::make<nn::Linear>(4, 2);
  cpu->load_state_dict(gpu->state_dict());
  std::vector<float> w0 = cpu->weight.to_vector<float>();
  optim::SGD gpu_opt(gpu->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD cpu_opt(cpu->parameters(), {.lr = 0.1, .momentum = 0.9});
  gpu->to(cuda_device(0));
  ASSERT_TRUE(gpu_opt.params(0)[0].is_same(gpu->weight));
  ASSERT_EQ(gpu->weight.device(), cuda_device(0));
  Tensor x = randn({8, 4});
  for (int step = 0; step < 2; ++step) {
    gpu_opt.zero_grad();
    cpu_opt.zero_grad();
    gpu(x.to(cuda_device(0))).pow(2.0).sum().backward();
    cpu(x).pow(2.0).sum().backward();
    gpu_opt.step();
    cpu_opt.step();
  }
  std::vector<float> g = gpu->weight.to_vector<float>(), c = cpu->weight.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], c[i], 1e-5) << i;
  EXPECT_NE(c, w0);  // the steps did change the weights
}

// The optimizer inside backward (nn/optim/in_backward.h) on the GPU: the same parameters as the
// usual step, bit for bit, and a step whose memory above the resident parameters and Adam state
// is lower by at least half the gradients' size (Note [Optimizer in backward]). The wide model of
// docs/workloads.md on a small batch: eight large weights of equal size, small activations, so
// the gradients are most of a step's memory.
TEST(CudaOptim, OptimizerInBackwardSameUpdatesLowerPeak) {
  SKIP_WITHOUT_CUDA();
  const Device gpu = cuda_device(0);
  Tensor x, y;
  std::tie(x, y) = image_batch(21);
  double step_mib[2] = {0, 0}, base_mib[2] = {0, 0}, grad_mib = 0;
  std::vector<Tensor> final_params[2];
  for (int mode = 0; mode < 2; ++mode) {
    manual_seed(8);
    auto model = nn::make_wide();
    model->to(gpu);
    optim::Adam opt(model->parameters(), {.lr = 1e-3});
    std::unique_ptr<optim::OptimizerInBackward> ib;
    if (mode == 1) ib = std::make_unique<optim::OptimizerInBackward>(opt);
    auto forward_backward = [&] { cross_entropy((*model)(x), y).backward(); };
    for (int warm = 0; warm < 2; ++warm) {  // the first creates the Adam state
      opt.zero_grad();
      forward_backward();
      if (mode == 0) opt.step();
    }
    opt.zero_grad();
    cuda::synchronize(0);
    const size_t base = cuda::memory_stats(0).allocated;  // parameters, Adam state, x, y
    cuda::reset_peak_memory_stats(0);
    forward_backward();
    if (mode == 0) opt.step();
    cuda::synchronize(0);
    base_mib[mode] = double(base) / (1 << 20);
    step_mib[mode] = double(cuda::memory_stats(0).peak_allocated - base) / (1 << 20);
    grad_mib = 0;
    for (const Tensor& p : model->parameters()) grad_mib += double(p.numel() * 4) / (1 << 20);
    // detach(): a copy made with autograd history would keep the parameter, and with it its
    // gradient, alive through the copy's backward node (as in PyTorch), into the next mode.
    for (const Tensor& p : model->parameters()) final_params[mode].push_back(p.detach().to(kCPU));
  }
  std::printf(
      "[ resident %.1f / %.1f MiB; a step adds %.1f MiB with step(), %.1f MiB inside "
      "backward; gradients %.1f MiB ]\n",
      base_mib[0], base_mib[1], step_mib[0], step_mib[1], grad_mib);
  EXPECT_NEAR(base_mib[1], base_mib[0], 1.0) << "both hold the parameters and Adam's state";
  EXPECT_GT(step_mib[0], grad_mib) << "the usual step holds every gradient at once";
  EXPECT_LT(step_mib[1], step_mib[0] - 0.5 * grad_mib);
  for (size_t i = 0; i < final_params[0].size(); ++i)
    EXPECT_TRUE(loom::testing::all_equal(final_params[0][i], final_params[1][i]))
        << "parameter " << i;
}

// Every byte a model, its training steps and its optimizer take on the GPU comes back when they
// are destroyed. For each workload and each way of stepping, one round first (it may create what
// stays for the whole process: cuBLASLt's workspace, cuDNN's plans and their workspace), then a
// second round, which must leave the allocator's `allocated` exactly where it found it.
TEST(CudaOptim, DestroyedModelAndOptimizerReturnEveryByte) {
  SKIP_WITHOUT_CUDA();
  const Device gpu = cuda_device(0);
  Tensor x, y;
  std::tie(x, y) = image_batch(5);
  const char* ways[] = {"model only", "forward and backward", "Adam step", "Adam in backward",
                        "SGD with momentum"};
  for (const char* workload : {"mlp", "cnn", "wide"}) {
    for (int way = 0; way < 5; ++way) {
      auto round = [&] {
        manual_seed(3);
        auto model = std::string(workload) == "cnn"    ? nn::make_cnn()
                     : std::string(workload) == "wide" ? nn::make_wide()
                                                       : nn::make_mlp();
        model->to(gpu);
        if (way == 0) return;
        std::unique_ptr<optim::Optimizer> opt;
        if (way == 4)
          opt = std::make_unique<optim::SGD>(model->parameters(),
                                             optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
        else
          opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
        std::unique_ptr<optim::OptimizerInBackward> ib;
        if (way == 3) ib = std::make_unique<optim::OptimizerInBackward>(*opt);
        for (int step = 0; step < 2; ++step) {
          opt->zero_grad();
          cross_entropy((*model)(x), y).backward();
          if (way == 2 || way == 4) opt->step();
        }
      };
      cuda::synchronize(0);
      const size_t first = cuda::memory_stats(0).allocated;
      round();
      cuda::synchronize(0);
      const size_t before = cuda::memory_stats(0).allocated;
      if (before != first)  // what the first round left for the process (library workspaces)
        std::printf("[ %s, %s: the first round left %.2f MiB ]\n", workload, ways[way],
                    (double(before) - double(first)) / (1 << 20));
      round();
      cuda::synchronize(0);
      const size_t after = cuda::memory_stats(0).allocated;
      EXPECT_EQ(after, before) << workload << ", " << ways[way] << ": "
                               << (double(after) - double(before)) / (1 << 20)
                               << " MiB still allocated after the model and optimizer are gone";
    }
  }
}

#endif  // LOOM_WITH_CUDA
