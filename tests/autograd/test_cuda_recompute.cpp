// Recomputed activations on CUDA (autograd/recompute.h): batch_norm_apply makes the forward's
// output again bit for bit (NCHW and channels-last, float32 and bfloat16 with float32
// parameters); ResNet-50's bottlenecks and a GPT under bf16 autocast get the plain run's gradients
// (within the run-to-run spread of a second plain run: cuDNN's and cuBLAS's reductions may differ
// between two runs of the same step) and a lower peak on the caching allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iostream>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "autograd/recompute.h"
#include "core/cuda/available.h"
#include "kernels/backend.h"
#include "kernels/raw_ops.h"
#include "nn/fuse.h"
#include "nn/gpt.h"
#include "nn/models.h"

using namespace loom;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kCPU).to(kF64) - b.to(kCPU).to(kF64))).item();
}

struct Outcome {
  std::vector<Tensor> grads;
  size_t peak = 0;  // the caching allocator's peak during forward and backward, above the start
};

Outcome run(nn::Module& m, bool recompute, const std::function<Tensor()>& loss) {
  autograd::RecomputeActivationsGuard guard(recompute);
  m.zero_grad();
  cuda::synchronize(0);
  cuda::reset_peak_memory_stats(0);
  const size_t base = cuda::memory_stats(0).allocated;
  {
    amp::Autocast autocast(kBF16);
    Tensor l = loss();
    l.backward();
  }
  cuda::synchronize(0);
  Outcome r;
  r.peak = cuda::memory_stats(0).peak_allocated - base;
  for (const Tensor& p : m.parameters()) r.grads.push_back(p.grad().to(kCPU));
  return r;
}

// Recomputed against plain: each gradient within twice the spread of two plain runs (0 when the
// kernels are deterministic) plus 1e-6 of its scale; the peak at most max_ratio of the plain one.
void expect_plain_gradients_lower_peak(nn::Module& m, const std::function<Tensor()>& loss,
                                       double max_ratio) {
  Outcome plain = run(m, false, loss), again = run(m, false, loss), re = run(m, true, loss);
  ASSERT_EQ(plain.grads.size(), re.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    const double scale = max(abs(plain.grads[i].to(kF64))).item();
    const double spread = max_abs_diff(plain.grads[i], again.grads[i]);
    EXPECT_LE(max_abs_diff(plain.grads[i], re.grads[i]), 2 * spread + 1e-6 * scale)
        << "parameter " << i << " (spread of two plain runs " << spread << ")";
  }
  EXPECT_LT(double(re.peak), max_ratio * double(plain.peak))
      << "plain " << plain.peak << " B, recomputed " << re.peak << " B";
  std::cout << "peak: plain " << plain.peak << " B, recomputed " << re.peak << " B ("
            << double(re.peak) / double(plain.peak) << ")\n";
}

}  // namespace

TEST(CudaRecompute, BatchNormApplyRebuildsTheForwardsOutputBitForBit) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Backend& be = backend_for(cuda_device(0));
  for (DType dt : {kF32, kBF16})
    for (bool cl : {false, true})
      for (bool relu : {false, true}) {
        Tensor x = (randn({8, 32, 9, 7}) * 3.0 + 1.0).to(dt).to(cuda_device(0));
        if (cl) x = raw::channels_last(x);
        Tensor w = randn({32}).to(cuda_device(0)), b = randn({32}).to(cuda_device(0));
        if (dt == kF32) w = w.to(dt), b = b.to(dt);
        Tensor rm = zeros({32}).to(cuda_device(0)), rv = ones({32}).to(cuda_device(0));
        BatchNormOut o = be.batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, relu);
        Tensor again = be.batch_norm_apply(x, w, b, o.save_mean, o.save_invstd, relu);
        EXPECT_EQ(again.strides(), o.y.strides());
        EXPECT_EQ(max_abs_diff(o.y, again), 0.0)
            << dtype_name(dt) << (cl ? " channels-last" : " NCHW") << " relu " << relu;
      }
}

TEST(CudaRecompute, ResNet50UnderBf16AutocastGetsThePlainGradientsAndPeaksLower) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  manual_seed(5);
  auto m = nn::make_resnet50({.num_classes = 10});
  m->to(cuda_device(0));
  Tensor x = randn({16, 3, 128, 128}).to(cuda_device(0));
  Tensor t = randint(0, 10, {16}).to(cuda_device(0));
  expect_plain_gradients_lower_peak(
      *m, [&] { return cross_entropy((*m)(x), t); }, 0.9);
}

// GPT: the GELU in the first Linear's cuBLASLt epilogue, recomputed by the elementwise kernel
// (equal to rounding, Note [Fused linear]): compared with a tolerance of bf16's rounding.
TEST(CudaRecompute, GptUnderBf16AutocastGetsThePlainGradientsAndPeaksLower) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  manual_seed(6);
  nn::GPT m(nn::GPTConfig{
      .vocab_size = 512, .block_size = 256, .n_layer = 4, .n_head = 4, .n_embd = 256});
  nn::fuse(m);  // gelu_mlp: the GELU in c_fc's epilogue
  m.to(cuda_device(0));
  Tensor idx = randint(0, 512, {8, 256}).to(cuda_device(0));
  Tensor tgt = randint(0, 512, {8, 256}).to(cuda_device(0));
  Outcome plain = run(m, false, [&] { return m.loss(idx, tgt); });
  Outcome re = run(m, true, [&] { return m.loss(idx, tgt); });
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    const double scale = max(abs(plain.grads[i].to(kF64))).item();
    EXPECT_LE(max_abs_diff(plain.grads[i], re.grads[i]), 2e-2 * scale + 1e-6) << "parameter " << i;
  }
  EXPECT_LT(double(re.peak), 0.95 * double(plain.peak))
      << "plain " << plain.peak << " B, recomputed " << re.peak << " B";
  std::cout << "peak: plain " << plain.peak << " B, recomputed " << re.peak << " B\n";
}
