// Llama on CUDA (nn/llama.h, nn/hf_llama.h): the transformers fixture loaded onto the GPU gives
// transformers' logits, loss and gradients in float32 (TF32 is off in loom) and its greedy ids
// with the KV cache; the KV-cache decode equals the full forward; in bfloat16 (cuDNN's fused
// attention with grouped key/value heads) the logits stay within bf16's rounding of
// transformers' and a training step under checkpointing gives the gradients of one without (to
// bf16's rounding: the recomputed forward may take other kernels' summation orders).
// Leaves out: speed (bench_train) and models of released sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/gpt_sample.h"
#include "nn/hf_llama.h"
#include "support/golden_file.h"

using namespace loom;
using namespace loom::nn;

namespace {

const Device kGpu = cuda_device(0);

std::string folder() { return test::golden_dir() + "hf/llama"; }

const test::GoldenFile& expected() {
  static const test::GoldenFile g = test::read_golden_file(test::golden_dir() + "hf/llama.txt");
  return g;
}

// max |got - want| / max |want|, on the host in float64.
double relative_error(const Tensor& got, const Tensor& want) {
  auto a = got.to(kCPU).to_vector<double>(), b = want.to(kCPU).to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

Tensor ids() { return expected().at("ids").to(kI64).to(kGpu); }

Tensor shifted_targets() {
  Tensor i = expected().at("ids").to(kI64);
  Tensor t = full(i.shape(), -1.0, {.dtype = kI64});
  NoGradGuard g;
  slice(t, 1, 0, i.size(1) - 1).copy_(slice(i, 1, 1, i.size(1)));
  return t.to(kGpu);
}

std::vector<int64_t> int_list(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector<double>()) out.push_back(int64_t(v));
  return out;
}

}  // namespace

TEST(CudaLlama, Float32MatchesTransformers) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto model = load_hf_llama(folder(), kGpu);
  model->eval();
  EXPECT_LT(relative_error(model->forward(ids()), expected().at("logits")), 1e-5);
  Tensor loss = model->loss(ids(), shifted_targets());
  EXPECT_LT(relative_error(loss, expected().at("loss")), 1e-5);
  loss.backward();
  EXPECT_LT(relative_error(model->embed_tokens->weight.grad(),
                           expected().at("grad.model.embed_tokens.weight")),
            1e-4);
  EXPECT_LT(relative_error(slice(model->layers->block(0)->attn->c_attn->weight.grad(), 0, 64, 96),
                           expected().at("grad.model.layers.0.self_attn.k_proj.weight")),
            1e-4);
  SampleOptions o{.max_new_tokens = 20, .temperature = 0.0};
  EXPECT_EQ(generate(*model, int_list(expected().at("prompt")), o),
            int_list(expected().at("generated")));
}

TEST(CudaLlama, KVCacheDecodeEqualsTheFullForward) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto model = load_hf_llama(folder(), kGpu);
  model->eval();
  NoGradGuard g;
  Tensor full_logits = model->forward(ids());
  KVCache cache;
  std::vector<Tensor> steps{model->forward(slice(ids(), 1, 0, 5), cache)};
  for (int64_t t = 5; t < 12; ++t)
    steps.push_back(model->forward(slice(ids(), 1, t, t + 1), cache));
  EXPECT_LT(relative_error(cat(steps, 1), full_logits), 1e-5);
}

TEST(CudaLlama, Bfloat16StaysWithinRoundingAndCheckpointingKeepsGradients) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto model = load_hf_llama(folder(), kGpu, kBF16);
  {
    NoGradGuard g;
    model->eval();
    // bfloat16 parameters and activations: every op rounds to 8 bits (GPT-2's bound, 5e-2)
    EXPECT_LT(relative_error(model->forward(ids()), expected().at("logits")), 5e-2);
  }
  model->train();
  model->loss(ids(), shifted_targets()).backward();
  std::vector<Tensor> plain;
  for (auto& p : model->parameters()) plain.push_back(p.grad().to(kCPU)), p.set_grad(Tensor());
  model->set_activation_checkpointing(true);
  model->loss(ids(), shifted_targets()).backward();
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_LT(relative_error(params[i].grad(), plain[i]), 1e-2) << i;  // recomputed in bf16
}
