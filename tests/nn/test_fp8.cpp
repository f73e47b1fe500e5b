// nn::convert_to_fp8 (nn/fp8.h): which Linears it marks and why it leaves the others (the first
// and last, widths not multiples of 16), the summary and the printed model, Linears inside fused
// modules, and that a marked model computes through fp8_linear: fused or not, the GPT's loss is
// the FP8 one.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "autograd/ops/fp8_linear.h"
#include "autograd/ops/ops.h"
#include "nn/fp8.h"
#include "nn/fuse.h"
#include "nn/fused.h"
#include "nn/gpt.h"

using namespace loom;
using namespace loom::nn;

namespace {

std::shared_ptr<Sequential> mlp(uint64_t seed) {
  manual_seed(seed);
  return make<Sequential>(make<Linear>(16, 32), make<ReLU>(), make<Linear>(32, 48), make<ReLU>(),
                          make<Linear>(48, 20), make<ReLU>(), make<Linear>(20, 4));
}

GPTConfig tiny_gpt() {
  GPTConfig c;
  c.vocab_size = 64, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  return c;
}

double gpt_loss(GPT& m) {
  Generator gen(4);
  Tensor idx = randint(0, 64, {2, 16}, {.dtype = kI64}, &gen);
  Tensor tgt = randint(0, 64, {2, 16}, {.dtype = kI64}, &gen);
  return m.loss(idx, tgt).item();
}

}  // namespace

TEST(ConvertToFp8, MarksTheMiddleLinearsAndSaysWhyOthersStay) {
  auto m = mlp(1);
  std::vector<Fp8Choice> c = convert_to_fp8(*m);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].at, "0");
  EXPECT_EQ(c[0].skipped_because, "the model's first Linear");
  EXPECT_EQ(c[1].at, "2");
  EXPECT_EQ(c[1].skipped_because, "");
  EXPECT_NE(c[2].skipped_because.find("not multiples of 16"), std::string::npos);
  EXPECT_EQ(c[3].skipped_because, "the model's last Linear");
  EXPECT_FALSE(m->at<Linear>(0)->fp8);
  EXPECT_TRUE(m->at<Linear>(2)->fp8);
  EXPECT_FALSE(m->at<Linear>(4)->fp8);
  EXPECT_EQ(fp8_summary(c),
            "nn::convert_to_fp8: 1 of 4 Linears in FP8 (tensorwise); kept in bf16: 0 (the model's "
            "first Linear), 4 (in_features=48, out_features=20: not multiples of 16), 6 (the "
            "model's last Linear)");
  std::ostringstream os;
  os << *m;
  EXPECT_NE(os.str().find("Linear(in_features=32, out_features=48, bias=true, fp8=tensorwise)"),
            std::string::npos)
      << os.str();
}

TEST(ConvertToFp8, ReachesLinearsInsideFusedModulesAndRunsFp8Linear) {
  auto plain = mlp(2), fused = mlp(2);
  nn::fuse(*fused);  // 0 and 2 become LinearReLU
  convert_to_fp8(*plain);
  std::vector<Fp8Choice> c = convert_to_fp8(*fused);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[1].at, "2");
  EXPECT_TRUE(fused->at<LinearReLU>(2)->linear->fp8);
  Generator gen(3);
  Tensor x = randn({16, 16}, {}, &gen);
  EXPECT_EQ(max(abs((*plain)(x) - (*fused)(x))).item(), 0.0);
  // And it is the FP8 product: the same layer without the mark gives another result.
  Tensor h = relu(linear(x, plain->at<Linear>(0)->weight, plain->at<Linear>(0)->bias));
  auto* l = plain->at<Linear>(2).get();
  EXPECT_EQ(max(abs(l->forward(h) - fp8_linear(h, l->weight, l->bias))).item(), 0.0);
  EXPECT_GT(max(abs(l->forward(h) - linear(h, l->weight, l->bias))).item(), 1e-4);
}

TEST(ConvertToFp8, GptKeepsTheFirstProjectionAndTheHeadAndTrainsFusedOrNot) {
  manual_seed(5);
  GPT plain(tiny_gpt());
  manual_seed(5);
  GPT fused(tiny_gpt());
  nn::fuse(fused);
  const double bf = gpt_loss(fused);
  std::vector<Fp8Choice> c = convert_to_fp8(plain);
  convert_to_fp8(fused);
  ASSERT_EQ(c.size(), 9u);  // 4 per block, and the head
  EXPECT_EQ(c.front().at, "h.0.attn.c_attn");
  EXPECT_EQ(c.front().skipped_because, "the model's first Linear");
  EXPECT_EQ(c.back().at, "lm_head");
  EXPECT_EQ(c.back().skipped_because, "the model's last Linear");
  EXPECT_EQ(fp8_summary(c),
            "nn::convert_to_fp8: 7 of 9 Linears in FP8 (tensorwise); kept in bf16: h.0.attn.c_attn "
            "(the model's first Linear), lm_head (the model's last Linear)");
  const double a = gpt_loss(plain), b = gpt_loss(fused);
  EXPECT_NEAR(a, b, 1e-3 * std::abs(a));  // the fused MLP runs its plain Linears under FP8
  EXPECT_GT(std::abs(b - bf), 1e-6);      // ... which changes the loss
}
