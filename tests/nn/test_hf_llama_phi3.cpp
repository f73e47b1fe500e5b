// Phi-3 folders read by nn/hf_llama.h (Note [Phi-3 as Llama]) against transformers itself: the
// fixture of tests/nn/golden/hf/phi3 (scripts/make-hf-fixtures.py: a random Phi3ForCausalLM with
// packed qkv_proj and gate_up_proj, its weights in bfloat16, and transformers' float32 logits,
// loss, gradients and greedy ids). Its sliding window caps the context; dropout is refused.
// Tolerances: Note [HF parity tolerances] in tests/nn/test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "autograd/ops/ops.h"
#include "nn/gpt_sample.h"
#include "nn/hf_llama.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using loom::test::hf_fixture;
using loom::test::int_list;
using loom::test::read_bytes;
using loom::test::relative_error;
using loom::test::shifted_targets;
using loom::test::TempDir;

namespace {

const test::GoldenFile& expected() {
  static const test::GoldenFile g = test::read_golden_file(hf_fixture("phi3.txt"));
  return g;
}

constexpr double kLogitsTol = 1e-5, kGradTol = 1e-4;

Tensor ids() { return expected().at("ids").to(kI64); }

// The fixture with one config field replaced, in `dir`.
void write_phi3_with(const TempDir& dir, const std::string& from, const std::string& to) {
  std::string text = read_bytes(hf_fixture("phi3/config.json"));
  ASSERT_NE(text.find(from), std::string::npos) << from;
  text.replace(text.find(from), from.size(), to);
  test::write_bytes(dir.file("config.json"), text);
  std::filesystem::copy_file(hf_fixture("phi3/model.safetensors"), dir.file("model.safetensors"));
}

}  // namespace

TEST(HfLlamaPhi3, TheTensorsMapWhole) {
  const LlamaConfig c = llama_config_from_hf(HfConfig::read(hf_fixture("phi3/config.json")));
  const HfTensorMap map = hf_llama_tensor_map(c, "phi3");
  int packed = 0;
  for (const HfTensor& e : map)
    if (e.hf_name.ends_with("qkv_proj.weight") || e.hf_name.ends_with("gate_up_proj.weight")) {
      EXPECT_EQ(e.rows, -1) << e.hf_name;
      ++packed;
    }
  EXPECT_EQ(packed, 4);                                          // 2 layers
  EXPECT_EQ(map.size(), hf_llama_tensor_map(c).size() - 2 * 3);  // q, k, v and gate, up apart
}

TEST(HfLlamaPhi3, LogitsLossAndGradientsMatchTransformers) {
  auto model = load_hf_llama(hf_fixture("phi3"));
  model->eval();
  Tensor logits = model->forward(ids());
  ASSERT_EQ(logits.shape(), expected().at("logits").shape());
  EXPECT_LT(relative_error(logits, expected().at("logits")), kLogitsTol);
  Tensor loss = model->loss(ids(), shifted_targets(ids()));
  EXPECT_LT(relative_error(loss, expected().at("loss")), kLogitsTol);
  loss.backward();
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  EXPECT_LT(relative_error(p.at("layers.0.attn.c_attn.weight").grad(),
                           expected().at("grad.model.layers.0.self_attn.qkv_proj.weight")),
            kGradTol);
  EXPECT_LT(relative_error(p.at("norm.weight").grad(), expected().at("grad.model.norm.weight")),
            kGradTol);
}

TEST(HfLlamaPhi3, GreedyGenerationMatchesTransformers) {
  auto model = load_hf_llama(hf_fixture("phi3"));
  std::vector<int64_t> want = int_list(expected().at("generated"));
  SampleOptions o{.max_new_tokens = int64_t(want.size()), .temperature = 0.0};
  EXPECT_EQ(generate(*model, int_list(expected().at("prompt")), o), want);
}

TEST(HfLlamaPhi3, ASlidingWindowCapsTheContextAndDropoutIsRefused) {
  TempDir window("loom_hf_phi3_window");
  write_phi3_with(window, "\"sliding_window\": null", "\"sliding_window\": 8");
  EXPECT_EQ(load_hf_llama(window.path)->config.max_seq_len, 8);
  TempDir dropout("loom_hf_phi3_dropout");
  write_phi3_with(dropout, "\"resid_pdrop\": 0.0", "\"resid_pdrop\": 0.1");
  const std::string e = test::error_of([&] { load_hf_llama(dropout.path); });
  EXPECT_NE(e.find("field \"resid_pdrop\" is 0.1; loom's Llama has no dropout"), std::string::npos)
      << e;
}
