// make_language_model from flags: the Llama sizes --n-kv-head and --ffn-hidden set (the KJV
// comparison of docs/llama.md sizes a Llama to a GPT's parameter count with them), and refused by
// name for GPT-2.
#include <gtest/gtest.h>

#include "nn/llama.h"
#include "support/errors.h"
#include "train/language_model.h"

using namespace loom;

TEST(LanguageModel, LlamaTakesKeyValueHeadsAndFfnWidthFromTheFlags) {
  train::LanguageModelSpec s{.arch = "llama",
                             .preset = "tiny",
                             .n_layer = 4,
                             .n_head = 4,
                             .n_embd = 128,
                             .n_kv_head = 4,
                             .ffn_hidden = 272,
                             .vocab_size = 1000,
                             .seq_len = 128};
  train::LanguageModel lm = train::make_language_model(s);
  auto* llama = dynamic_cast<nn::Llama*>(lm.net.get());
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->config.n_kv_heads, 4);
  EXPECT_EQ(llama->config.ffn_hidden, 272);
  // 4 x (4 128^2 attention + 3 x 128 x 272 SwiGLU + 2 x 128 norms) + 128 final norm + embedding and
  // untied head 2 x 1000 x 128: the GPT "mini" of the same vocabulary has 937,984.
  EXPECT_EQ(llama->num_parameters(),
            4 * (4 * 128 * 128 + 3 * 128 * 272 + 2 * 128) + 128 + 2 * 1000 * 128);
}

TEST(LanguageModel, LlamaSizeFlagsAreRefusedForGpt2ByName) {
  train::LanguageModelSpec s{.arch = "gpt2", .n_kv_head = 2};
  test::expect_error([&] { train::make_language_model(s); },
                     {"--n-kv-head and --ffn-hidden size a Llama (--arch llama), not --arch gpt2"});
}
