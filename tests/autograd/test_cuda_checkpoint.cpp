// Activation checkpointing on CUDA (autograd/checkpoint.h): a GPT with dropout under bf16
// autocast gets, checkpointed, the loss and the gradients of the plain model (the dropout masks
// replayed from the CUDA generator), and its backward peaks lower on the caching allocator.
#include <gtest/gtest.h>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/fuse.h"
#include "nn/gpt.h"

using namespace loom;

namespace {
double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kCPU).to(kF64) - b.to(kCPU).to(kF64))).item();
}

struct Outcome {
  Tensor loss;
  nn::NamedTensors grads;
  size_t peak = 0;  // the caching allocator's peak during forward and backward, above the start
};

Outcome run(bool ckpt, const nn::GPTConfig& c, const Tensor& idx, const Tensor& tgt) {
  manual_seed(11);
  nn::GPT m(c);
  nn::fuse(m);  // the fused blocks training programs run (the chain without checkpointing)
  m.to(cuda_device(0));
  m.set_activation_checkpointing(ckpt);
  cuda::synchronize(0);
  cuda::reset_peak_memory_stats(0);
  const size_t base = cuda::memory_stats(0).allocated;
  manual_seed(13);
  Outcome o;
  {
    amp::Autocast autocast(kBF16);
    o.loss = m.loss(idx, tgt);
  }
  o.loss.backward();
  cuda::synchronize(0);
  o.peak = cuda::memory_stats(0).peak_allocated - base;
  for (auto& [n, p] : m.named_parameters()) o.grads.emplace_back(n, p.grad().to(kCPU));
  return o;
}
}  // namespace

TEST(CudaCheckpoint, GptWithDropoutSameGradientsAndALowerPeak) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  nn::GPTConfig c{.vocab_size = 512,
                  .block_size = 256,
                  .n_layer = 6,
                  .n_head = 4,
                  .n_embd = 256,
                  .dropout = 0.1};
  manual_seed(12);
  Tensor idx = randint(0, 512, {8, 256}).to(cuda_device(0));
  Tensor tgt = randint(0, 512, {8, 256}).to(cuda_device(0));
  Outcome plain = run(false, c, idx, tgt), ckpt = run(true, c, idx, tgt);
  EXPECT_EQ(max_diff(plain.loss, ckpt.loss), 0.0);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)  // the same kernels on the same inputs
    EXPECT_LE(max_diff(plain.grads[i].second, ckpt.grads[i].second), 1e-6) << plain.grads[i].first;
  EXPECT_LT(double(ckpt.peak), 0.7 * double(plain.peak))
      << "plain " << plain.peak << " B, checkpointed " << ckpt.peak << " B";
  std::printf("peak above the weights: plain %.1f MiB, checkpointed %.1f MiB\n",
              double(plain.peak) / (1 << 20), double(ckpt.peak) / (1 << 20));
}
