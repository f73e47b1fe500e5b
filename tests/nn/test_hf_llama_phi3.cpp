// Phi-3 folders read by nn/hf_llama.h (Note [Phi-3 as Llama]) against transformers itself: the
// fixture of tests/nn/golden/hf/phi3 (scripts/make-hf-fixtures.py: a random Phi3ForCausalLM with
// packed qkv_proj and gate_up_proj, its weights in bfloat16, and transformers' float32 logits,
// loss, gradients and greedy ids). Its sliding window caps the context; dropout is refused.
// Tolerances: Note [HF parity tolerances] in tests/nn/test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <map>

#include "autograd/ops/ops.h"
#include "nn/hf_llama.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using namespace loom::test;

namespace {

const GoldenFile& expected() {
  static const GoldenFile g = read_golden_file(hf_fixture("phi3.txt"));
  return g;
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
  expect_logits_loss_and_backward(*model, expected());
  std::map<std::string, Tensor> p;
  for (const auto& [n, t] : model->named_parameters()) p[n] = t;
  EXPECT_LT(relative_error(p.at("layers.0.attn.c_attn.weight").grad(),
                           expected().at("grad.model.layers.0.self_attn.qkv_proj.weight")),
            kHfGradTol);
  EXPECT_LT(relative_error(p.at("norm.weight").grad(), expected().at("grad.model.norm.weight")),
            kHfGradTol);
}

TEST(HfLlamaPhi3, GreedyGenerationMatchesTransformers) {
  expect_greedy_ids(*load_hf_llama(hf_fixture("phi3")), expected());
}

TEST(HfLlamaPhi3, ASlidingWindowCapsTheContextAndDropoutIsRefused) {
  TempDir window("loom_hf_phi3_window");
  copy_fixture_with("phi3", window.path, {{"\"sliding_window\": null", "\"sliding_window\": 8"}});
  EXPECT_EQ(load_hf_llama(window.path)->config.max_seq_len, 8);
  TempDir dropout("loom_hf_phi3_dropout");
  copy_fixture_with("phi3", dropout.path, {{"\"resid_pdrop\": 0.0", "\"resid_pdrop\": 0.1"}});
  const std::string e = error_of([&] { load_hf_llama(dropout.path); });
  EXPECT_NE(e.find("field \"resid_pdrop\" is 0.1; loom's Llama has no dropout"), std::string::npos)
      << e;
}
