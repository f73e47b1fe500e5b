// Helpers for the tests against Hugging Face transformers' fixtures (tests/nn/golden/hf/, made by
// scripts/make-hf-fixtures.py): a fixture's path, the scale-relative error the parity tolerances
// bound, the labels transformers computes its loss with, id lists, and the checks every decoder
// fixture gets (logits and loss, greedy ids, a copy with one config field changed). Leaves out:
// reading the values (tests/support/golden_file.h) and the reasons for the tolerances (Note [HF
// parity tolerances] in tests/nn/test_hf_gpt2.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/decoder_lm.h"
#include "nn/gpt_sample.h"
#include "support/golden_file.h"
#include "support/temp_files.h"

namespace loom::test {

// A file or folder of tests/nn/golden/hf/.
inline std::string hf_fixture(const std::string& name) { return golden_dir() + "hf/" + name; }

// max |got - want| / max |want|, on the host in float64: relative to the tensor's scale, so
// entries near zero (most logits of a random model, most of an embedding's gradient) are held to
// the same absolute bound as the large ones instead of an undefined relative error.
inline double relative_error(const Tensor& got, const Tensor& want) {
  auto a = got.to(kCPU).to_vector<double>(), b = want.to(kCPU).to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

// ids: (B, T) int64 on the CPU -> (B, T): the labels transformers shifts them into, position t
// predicting id t + 1; the last position has no target (-1, which the models' loss ignores).
inline Tensor shifted_targets(const Tensor& ids) {
  Tensor t = full(ids.shape(), -1.0, {.dtype = kI64});
  NoGradGuard g;
  slice(t, 1, 0, ids.size(1) - 1).copy_(slice(ids, 1, 1, ids.size(1)));
  return t;
}

// A golden file's ids (stored as float64) as integers.
inline std::vector<int64_t> int_list(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector<double>()) out.push_back(int64_t(v));
  return out;
}

// Note [HF parity tolerances]'s float32 bounds: logits and loss, gradients.
constexpr double kHfLogitsTol = 1e-5, kHfGradTol = 1e-4;

// A decoder fixture `g`: the model's logits (eval mode) and loss on g's ids within kHfLogitsTol
// of transformers', then the loss's backward, leaving the gradients for the caller to compare.
inline void expect_logits_loss_and_backward(nn::DecoderLM& model, const GoldenFile& g) {
  model.eval();
  const Tensor ids = g.at("ids").to(kI64);
  const Tensor logits = model.forward(ids);
  ASSERT_EQ(logits.shape(), g.at("logits").shape());
  EXPECT_LT(relative_error(logits, g.at("logits")), kHfLogitsTol);
  Tensor loss = model.loss(ids, shifted_targets(ids));
  EXPECT_LT(relative_error(loss, g.at("loss")), kHfLogitsTol);
  loss.backward();
}

// Greedy generation from g's prompt gives transformers' ids.
inline void expect_greedy_ids(nn::CausalLM& model, const GoldenFile& g) {
  const std::vector<int64_t> want = int_list(g.at("generated"));
  nn::SampleOptions o{.max_new_tokens = int64_t(want.size()), .temperature = 0.0};
  EXPECT_EQ(nn::generate(model, int_list(g.at("prompt")), o), want);
}

// Fixture folder `name` copied into `dir` (config.json and model.safetensors), each `from` of the
// config replaced by its `to`.
inline void copy_fixture_with(const std::string& name, const std::string& dir,
                              const std::vector<std::pair<std::string, std::string>>& edits) {
  std::string config = read_bytes(hf_fixture(name + "/config.json"));
  for (const auto& [from, to] : edits) {
    ASSERT_NE(config.find(from), std::string::npos) << from;
    config.replace(config.find(from), from.size(), to);
  }
  write_bytes(dir + "/config.json", config);
  std::filesystem::copy_file(hf_fixture(name + "/model.safetensors"), dir + "/model.safetensors");
}

}  // namespace loom::test
