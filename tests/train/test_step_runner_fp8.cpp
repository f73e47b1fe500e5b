// --amp fp8 through train::StepRunner on the CPU (the emulated FP8 products): a tiny GPT, fused
// and converted as train_gpt does it, trained 50 full-batch steps on a sequence with one bit of
// randomness per token, ends within a few percent of the same run under --amp bf16, with float32
// parameters throughout.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops/ops.h"
#include "nn/fp8.h"
#include "nn/fuse.h"
#include "nn/gpt.h"
#include "nn/optim/adam.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

struct LossCurve {
  double first = 0, last = 0;
  int converted = 0;
  bool params_f32 = true;
};

// (B, T + 1) tokens, each the previous one plus 1 or 2 (mod V), the choice a coin flip: the loss
// cannot go below ln 2 = 0.69.
Tensor coin_sequences(int64_t B, int64_t T, int64_t V) {
  Generator gen(13);
  std::vector<int64_t> flips =
      randint(0, 2, {B, T + 1}, {.dtype = kI64}, &gen).to_vector<int64_t>();
  std::vector<int64_t> starts = randint(0, V, {B}, {.dtype = kI64}, &gen).to_vector<int64_t>();
  std::vector<int64_t> seq(size_t(B * (T + 1)));
  for (int64_t b = 0; b < B; ++b) {
    int64_t v = starts[size_t(b)];
    for (int64_t t = 0; t <= T; ++t) {
      seq[size_t(b * (T + 1) + t)] = v;
      v = (v + 1 + flips[size_t(b * (T + 1) + t)]) % V;
    }
  }
  return from_vector(seq, {B, T + 1});
}

LossCurve train_gpt(bool fp8) {
  manual_seed(11);
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
  nn::GPT model(c);
  nn::fuse(model);
  LossCurve r;
  if (fp8)
    for (const auto& choice : nn::convert_to_fp8(model))
      r.converted += choice.skipped_because.empty();
  optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  train::StepRunner runner(model, opt, 0.0, false);
  runner.set_amp(kBF16, nullptr);
  Tensor seq = coin_sequences(8, 16, 32);  // 8 x 16 = 128 rows: a multiple of 16
  Tensor x = seq.slice(1, 0, 16).contiguous(), y = seq.slice(1, 1, 17).contiguous();
  for (int i = 0; i < 50; ++i) {
    double loss = runner.step(x, y).item();
    if (i == 0) r.first = loss;
    r.last = loss;
  }
  for (const Tensor& p : model.parameters()) r.params_f32 = r.params_f32 && p.dtype() == kF32;
  return r;
}

}  // namespace

TEST(Fp8Step, TinyGptTrainsAsWellAsBf16) {
  LossCurve bf16 = train_gpt(false), fp8 = train_gpt(true);
  ASSERT_LT(bf16.last, 0.6 * bf16.first) << "the bf16 run itself must learn";
  EXPECT_EQ(fp8.converted, 7);  // 8 Linears and the head; the first and the head stay bf16
  EXPECT_NEAR(fp8.first, bf16.first, 0.02 * bf16.first);
  EXPECT_NEAR(fp8.last, bf16.last, 0.05 * bf16.last);
  EXPECT_NE(fp8.last, bf16.last) << "the FP8 run computes something else than bf16";
  EXPECT_TRUE(fp8.params_f32);
}
