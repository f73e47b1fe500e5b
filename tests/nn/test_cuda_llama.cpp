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
#include "support/hf_golden.h"

using namespace loom;
using namespace loom::nn;
using loom::test::int_list;
using loom::test::relative_error;

namespace {

const Device kGpu = cuda_device(0);

std::string folder() { return test::hf_fixture("llama"); }

const test::GoldenFile& expected() {
  static const test::GoldenFile g = test::read_golden_file(test::hf_fixture("llama.txt"));
  return g;
}

Tensor ids() { return expected().at("ids").to(kI64).to(kGpu); }

Tensor shifted_targets() { return test::shifted_targets(expected().at("ids").to(kI64)).to(kGpu); }

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
