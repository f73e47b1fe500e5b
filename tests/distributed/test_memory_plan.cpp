// The memory plan (Note [Memory plan] in distributed/memory_plan.h) against the models themselves:
// the parameters per rank equal the published counts, a pipeline stage's parameters()
// (PipelineStage), and the tensor-parallel plan's shares counted from a built model; ZeRO divides
// what it shards; tensor parallelism and checkpointing shrink the activations; errors name the
// layout. And train_gpt --plan-only prints the table.
#include <gtest/gtest.h>

#include "distributed/memory_plan.h"
#include "distributed/pipeline/pipeline_stage.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "support/errors.h"

using namespace loom;
using namespace loom::distributed;

namespace {

ModelShape llama_shape(const nn::LlamaConfig& c) { return model_shape(c, "llama"); }
ModelShape gpt_shape(const nn::GPTConfig& c) { return model_shape(c, "gpt"); }

int64_t numel_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
}

TEST(MemoryPlan, OneRankHoldsThePublishedParameterCounts) {
  for (const char* name : {"llama3.2-1b", "llama3-8b"}) {
    nn::LlamaConfig c = nn::LlamaConfig::preset(name);
    RankMemory r = plan_memory(llama_shape(c), {});
    EXPECT_EQ(r.parameters, c.num_parameters()) << name;
    EXPECT_DOUBLE_EQ(r.parameter_bytes, 4.0 * double(c.num_parameters()));
    EXPECT_DOUBLE_EQ(r.optimizer_bytes, 8.0 * double(c.num_parameters()));
  }
  EXPECT_EQ(plan_memory(llama_shape(nn::LlamaConfig::preset("llama3-8b")), {}).parameters,
            8030261248);
  nn::GPTConfig g{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 4, .n_embd = 32};
  EXPECT_EQ(plan_memory(gpt_shape(g), {}).parameters, nn::GPT(g).num_parameters());
}

TEST(MemoryPlan, APipelineRankHoldsItsFullestStagesParameters) {
  for (bool tied : {true, false}) {
    nn::LlamaConfig c = nn::LlamaConfig::preset("tiny");
    c.n_layers = 4, c.tie_embeddings = tied;
    nn::Llama model(c);
    int64_t fullest = 0;
    for (int s = 0; s < 2; ++s)
      fullest = std::max(fullest, numel_of(PipelineStage(model, s, 2).parameters()));
    EXPECT_EQ(plan_memory(llama_shape(c), {.pp = 2}).parameters, fullest) << "tied " << tied;
  }
}

// The tensor-parallel plan splits c_attn (weight, bias), c_fc (weight, bias) and both c_proj
// weights; everything else is whole.
TEST(MemoryPlan, ATensorParallelRankHoldsHalfOfTheSplitLinears) {
  nn::GPTConfig g{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 4, .n_embd = 32};
  nn::GPT model(g);
  int64_t per_rank = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool split = name.ends_with("c_attn.weight") || name.ends_with("c_attn.bias") ||
                       name.ends_with("c_fc.weight") || name.ends_with("c_fc.bias") ||
                       name.ends_with("c_proj.weight");
    per_rank += split ? p.numel() / 2 : p.numel();
  }
  EXPECT_EQ(plan_memory(gpt_shape(g), {.tp = 2}).parameters, per_rank);
}

TEST(MemoryPlan, ZeroDividesWhatItShardsAndActivationsShrinkWhereTheyShould) {
  const ModelShape m = llama_shape(nn::LlamaConfig::preset("llama3-8b"));
  const RankMemory one = plan_memory(m, {});
  const RankMemory z1 = plan_memory(m, {.dp = 4, .zero = 1});
  const RankMemory z3 = plan_memory(m, {.dp = 4, .zero = 3});
  EXPECT_DOUBLE_EQ(z1.optimizer_bytes, one.optimizer_bytes / 4);
  EXPECT_DOUBLE_EQ(z1.gradient_bytes, one.gradient_bytes);
  EXPECT_DOUBLE_EQ(z3.gradient_bytes, one.gradient_bytes / 4);
  EXPECT_DOUBLE_EQ(z3.parameter_bytes, one.parameter_bytes / 4);
  EXPECT_DOUBLE_EQ(z3.activation_bytes, one.activation_bytes);  // ZeRO leaves activations
  EXPECT_LT(plan_memory(m, {.tp = 2}).activation_bytes, one.activation_bytes);
  EXPECT_LT(plan_memory(m, {.checkpointing = true}).activation_bytes, one.activation_bytes / 10);
  // Twice the tokens, twice the activations.
  EXPECT_DOUBLE_EQ(plan_memory(m, {.micro_batch = 2}).activation_bytes, 2 * one.activation_bytes);
}

TEST(MemoryPlan, LayoutsThatDoNotDivideTheModelAreNamed) {
  const ModelShape m = llama_shape(nn::LlamaConfig::preset("llama3-8b"));
  test::expect_error([&] { plan_memory(m, {.tp = 3}); },
                     {"memory plan (llama): tp 3 does not divide the 32 heads"});
  test::expect_error([&] { plan_memory(m, {.pp = 3}); }, {"pp 3 does not divide the 32 layers"});
  for (const Layout& l : layouts_for(m, 8, 1, 2048, false)) {
    EXPECT_EQ(l.dp * l.tp * l.pp, 8);
    // What parallelize runs: FSDP (pipelined or not, tensor-parallel stages too), nothing on one
    // copy.
    EXPECT_EQ(l.zero, l.dp == 1 || l.zero == 0 ? 0 : 3) << l.pp << " " << l.tp << " " << l.zero;
  }
  EXPECT_EQ(layouts_for(m, 8, 1, 2048, false).size(), 16u);
}

}  // namespace
