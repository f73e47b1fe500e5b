// init::ParameterScope (Note [Where a module makes its parameters] in nn/init.h): modules made
// inside one have their parameters on its device and dtype; with skip_init no random number is
// drawn (the generator is where it was) while constants still fill; scopes nest and end.
#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "nn/gpt.h"
#include "nn/init.h"
#include "nn/llama.h"

using namespace loom;

namespace {

nn::GPTConfig tiny_gpt() {
  return {.vocab_size = 32, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16};
}

TEST(ParameterScope, ModulesMadeInsideHaveTheScopesDtype) {
  nn::init::ParameterScope where(kCPU, kF64);
  nn::GPT gpt(tiny_gpt());
  for (const auto& [name, p] : gpt.named_parameters()) EXPECT_EQ(p.dtype(), kF64) << name;
}

TEST(ParameterScope, SkipInitDrawsNoRandomNumbersButFillsConstants) {
  manual_seed(7);
  const double expected = randn({1}).item();  // the first draw after seeding
  manual_seed(7);
  {
    nn::init::ParameterScope where(kCPU, kF32, /*skip_init=*/true);
    nn::Llama llama(nn::LlamaConfig::preset("tiny"));  // Linears, embedding, RMSNorms
    EXPECT_EQ(max(abs(llama.norm->parameters()[0] - 1.0)).item(), 0.0);  // ones_ still ran
  }
  EXPECT_EQ(randn({1}).item(), expected);  // the Llama's construction drew nothing
}

TEST(ParameterScope, ScopesNestAndEndWithTheirBlock) {
  {
    nn::init::ParameterScope outer(kCPU, kF64);
    {
      nn::init::ParameterScope inner(kCPU, kBF16);
      EXPECT_EQ(nn::init::new_parameter({2}).dtype(), kBF16);
    }
    EXPECT_EQ(nn::init::new_parameter({2}).dtype(), kF64);
  }
  EXPECT_EQ(nn::init::new_parameter({2}).dtype(), kF32);
  EXPECT_FALSE(nn::init::skipping_init());
  manual_seed(3);
  nn::GPT a(tiny_gpt());
  manual_seed(3);
  nn::GPT b(tiny_gpt());  // outside any scope: initialised from the seed, as before
  EXPECT_EQ(max(abs(a.wte->weight - b.wte->weight)).item(), 0.0);
  EXPECT_GT(max(abs(a.wte->weight)).item(), 0.0);
}

}  // namespace
