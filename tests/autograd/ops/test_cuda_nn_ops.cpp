// CUDA against CPU through the differentiable ops (autograd/ops): forward values and the gradients
// of every input for conv2d (with bias, groups, stride), max/avg/adaptive pooling, batch_norm in
// training (with the running-stat update) and eval, and matmul/linear, all in float32 (TF32 off).
// A small cnn block (conv, batch norm, relu, pool) checks them chained. Skipped without a GPU;
// compiles to nothing without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "autograd/ops/ops.h"
#include "core/cuda/stream.h"
#include "support/nn_kernels_support.h"

using namespace loom;
using namespace loom::testing;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs f on CPU copies and on CUDA copies of `inputs` (all leaves that require grad),
// backpropagates a random weighting of the output, and compares the outputs and every input's
// gradient.
void expect_cuda_matches_cpu(const std::string& what, const std::vector<Tensor>& inputs,
                             const Fn& f, double tol = 2e-5) {
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : inputs) {
    cpu_in.push_back(t.detach().clone().requires_grad_(true));
    gpu_in.push_back(t.detach().to(gpu()).requires_grad_(true));
  }
  Tensor y_cpu = f(cpu_in), y_gpu = f(gpu_in);
  ASSERT_TRUE(y_gpu.device().is_cuda()) << what;
  ASSERT_EQ(y_cpu.shape(), y_gpu.shape()) << what;
  EXPECT_LT(rel_err(y_gpu, host(y_cpu)), tol) << what << ": forward";
  Tensor weight = random_tensor(y_cpu.shape(), kF32, 99);
  (y_cpu * weight).sum().backward();
  (y_gpu * weight.to(gpu())).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(cpu_in[i].grad().defined() && gpu_in[i].grad().defined())
        << what << ": input " << i;
    ASSERT_TRUE(gpu_in[i].grad().device().is_cuda()) << what << ": input " << i;
    EXPECT_LT(rel_err(gpu_in[i].grad(), host(cpu_in[i].grad())), tol)
        << what << ": grad of input " << i;
  }
}

Conv2dParams conv_params(int64_t stride, int64_t pad, int64_t dil, int64_t groups) {
  Conv2dParams p;
  p.stride = {stride, stride}, p.padding = {pad, pad}, p.dilation = {dil, dil}, p.groups = groups;
  return p;
}

TEST(CudaAutograd, Conv2d) {
  SKIP_WITHOUT_CUDA();
  for (auto [p, C, K] :
       {std::tuple{conv_params(1, 1, 1, 1), 3, 8}, std::tuple{conv_params(2, 0, 2, 2), 4, 6},
        std::tuple{conv_params(1, 1, 1, 4), 4, 4}}) {
    Tensor x = random_tensor({2, C, 10, 9}, kF32, 1),
           w = random_tensor({K, C / p.groups, 3, 3}, kF32, 2, kCPU, 0.3);
    Tensor b = random_tensor({K}, kF32, 3);
    expect_cuda_matches_cpu(
        "conv2d groups " + std::to_string(p.groups), {x, w, b},
        [p](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], p); });
  }
}

TEST(CudaAutograd, Pooling) {
  SKIP_WITHOUT_CUDA();
  Pool2dParams p2;  // 2x2, stride 2
  Pool2dParams p3;
  p3.kernel = {3, 3}, p3.stride = {2, 2}, p3.padding = {1, 1}, p3.count_include_pad = false;
  Tensor x = random_tensor({2, 3, 9, 8}, kF32, 4);
  expect_cuda_matches_cpu("max_pool2d 2x2", {x},
                          [&](const std::vector<Tensor>& in) { return max_pool2d(in[0], p2); });
  expect_cuda_matches_cpu("max_pool2d 3x3 pad", {x},
                          [&](const std::vector<Tensor>& in) { return max_pool2d(in[0], p3); });
  expect_cuda_matches_cpu("avg_pool2d 3x3 pad", {x},
                          [&](const std::vector<Tensor>& in) { return avg_pool2d(in[0], p3); });
  expect_cuda_matches_cpu("adaptive_avg_pool2d", {x}, [&](const std::vector<Tensor>& in) {
    return adaptive_avg_pool2d(in[0], {1, 1});
  });
}

TEST(CudaAutograd, BatchNormTrainingAndEval) {
  SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({6, 4, 5, 5}, kF32, 5, kCPU, 2.0, 1.0);
  Tensor w = random_tensor({4}, kF32, 6, kCPU, 0.5, 1.0), b = random_tensor({4}, kF32, 7);
  Tensor rm_cpu = random_tensor({4}, kF32, 8), rv_cpu = random_tensor({4}, kF32, 9, kCPU, 0.1, 1.0);
  Tensor rm_gpu = rm_cpu.clone().to(gpu()), rv_gpu = rv_cpu.clone().to(gpu());
  for (bool training : {true, false}) {
    expect_cuda_matches_cpu(training ? "batch_norm training" : "batch_norm eval", {x, w, b},
                            [&](const std::vector<Tensor>& in) {
                              bool on_gpu = in[0].device().is_cuda();
                              return batch_norm(in[0], in[1], in[2], on_gpu ? rm_gpu : rm_cpu,
                                                on_gpu ? rv_gpu : rv_cpu, training, 0.1, 1e-5);
                            });
    EXPECT_LT(rel_err(rm_gpu, host(rm_cpu)), 1e-6) << "running_mean after training=" << training;
    EXPECT_LT(rel_err(rv_gpu, host(rv_cpu)), 1e-6) << "running_var after training=" << training;
  }
}

TEST(CudaAutograd, MatmulAndLinear) {
  SKIP_WITHOUT_CUDA();
  Tensor a = random_tensor({33, 70}, kF32, 10), b = random_tensor({70, 41}, kF32, 11);
  expect_cuda_matches_cpu("matmul", {a, b},
                          [](const std::vector<Tensor>& in) { return in[0].matmul(in[1]); });
  Tensor w = random_tensor({41, 70}, kF32, 12), bias = random_tensor({41}, kF32, 13);
  expect_cuda_matches_cpu("linear", {a, w, bias}, [](const std::vector<Tensor>& in) {
    return linear(in[0], in[1], in[2]);
  });
  Tensor ba = random_tensor({3, 9, 16}, kF32, 14), bb = random_tensor({3, 16, 7}, kF32, 15);
  expect_cuda_matches_cpu("bmm", {ba, bb},
                          [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); });
}

TEST(CudaAutograd, SmallCnnBlock) {
  SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({8, 1, 12, 12}, kF32, 16);
  Tensor w1 = random_tensor({8, 1, 3, 3}, kF32, 17, kCPU, 0.3),
         w2 = random_tensor({16, 8, 3, 3}, kF32, 18, kCPU, 0.1);
  Tensor g1 = random_tensor({8}, kF32, 19, kCPU, 0.1, 1.0),
         b1 = random_tensor({8}, kF32, 20, kCPU, 0.1);
  Pool2dParams p2;
  expect_cuda_matches_cpu(
      "conv-bn-relu-pool-conv", {x, w1, w2, g1, b1},
      [&](const std::vector<Tensor>& in) {
        Tensor h = conv2d(in[0], in[1], Tensor(), conv_params(1, 1, 1, 1));
        h = batch_norm(h, in[3], in[4], Tensor(), Tensor(), true).relu();
        h = max_pool2d(h, p2);
        return adaptive_avg_pool2d(conv2d(h, in[2], Tensor(), conv_params(1, 1, 1, 1)), {1, 1})
            .flatten(1);
      },
      1e-4);
}

}  // namespace

#endif  // LOOM_WITH_CUDA
