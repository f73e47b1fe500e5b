// Activation checkpointing (autograd/checkpoint.h): a block with dropout gives, checkpointed, the
// output and the gradients of its input and weights of the plain block bit for bit, and leaves
// the default generator where the plain run leaves it; a chain of blocks peaks lower (the CPU
// allocator's live bytes); no-grad and inputs without gradients run the block as it is; a block
// returning integers is an error naming checkpoint; a GPT with dropout trains the same with
// set_activation_checkpointing (nn::GPT).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "core/allocator.h"
#include "nn/fuse.h"
#include "nn/gpt.h"

using namespace loom;

namespace {

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         max(abs(a.to(kF64) - b.to(kF64))).item() == 0.0;
}

struct Weights {
  Tensor w1, w2;
};

Weights weights(int64_t in, int64_t hidden, uint64_t seed) {
  Generator g(seed);
  return {(randn({in, hidden}, {}, &g) * 0.1).requires_grad_(true),
          (randn({hidden, in}, {}, &g) * 0.1).requires_grad_(true)};
}

// x (N, in) -> (N, in): dropout(gelu(x w1)) w2 + x
Tensor block(const Tensor& x, const Weights& w, double p) {
  return matmul(dropout(gelu(matmul(x, w.w1)), p, true), w.w2) + x;
}

}  // namespace

TEST(Checkpoint, SameValuesGradientsAndRandomStreamAsThePlainBlock) {
  Generator gx(1);
  Tensor x0 = randn({32, 16}, {}, &gx);
  Weights a = weights(16, 64, 2), b = weights(16, 64, 2);
  Tensor xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
  manual_seed(7);
  Tensor ya = block(block(xa, a, 0.3), a, 0.3);
  ya.sum().backward();
  const GeneratorState after_plain = default_generator().state();
  manual_seed(7);
  auto f = [&](const std::vector<Tensor>& in) { return block(in[0], b, 0.3); };
  Tensor yb = autograd::checkpoint(f, {autograd::checkpoint(f, {xb})});
  EXPECT_STREQ(yb.grad_fn()->name, "checkpoint");
  yb.sum().backward();
  EXPECT_EQ(default_generator().state().offset, after_plain.offset);
  EXPECT_TRUE(bit_equal(ya, yb));
  EXPECT_TRUE(bit_equal(xa.grad(), xb.grad()));
  EXPECT_TRUE(bit_equal(a.w1.grad(), b.w1.grad()));
  EXPECT_TRUE(bit_equal(a.w2.grad(), b.w2.grad()));
}

TEST(Checkpoint, AChainOfBlocksPeaksLower) {
  Weights w = weights(256, 1024, 3);
  Generator gx(4);
  Tensor x0 = randn({2048, 256}, {}, &gx);
  auto peak_of = [&](bool ckpt) {
    for (Tensor* t : {&w.w1, &w.w2}) t->set_grad(Tensor());
    Tensor x = x0.clone().requires_grad_(true);
    reset_cpu_peak();
    const uint64_t base = cpu_alloc_stats().live_bytes;
    Tensor y = x;
    for (int i = 0; i < 6; ++i)
      y = ckpt ? autograd::checkpoint(
                     [&](const std::vector<Tensor>& in) { return block(in[0], w, 0.0); }, {y})
               : block(y, w, 0.0);
    y.sum().backward();
    return cpu_alloc_stats().peak_live_bytes - base;
  };
  if (cpu_alloc_stats().peak_live_bytes == 0) GTEST_SKIP() << "no malloc_usable_size here";
  const uint64_t plain = peak_of(false), ckpt = peak_of(true);
  EXPECT_LT(double(ckpt), 0.6 * double(plain)) << "plain " << plain << " B, checkpointed " << ckpt;
}

TEST(Checkpoint, RunsTheBlockAsItIsWithoutGradientsAndNamesBadBlocks) {
  Weights w = weights(4, 8, 5);
  Tensor x = randn({3, 4});  // needs no gradient: the block runs as it is, weights still learn
  Tensor y = autograd::checkpoint(
      [&](const std::vector<Tensor>& in) { return block(in[0], w, 0.0); }, {x});
  EXPECT_STRNE(y.grad_fn()->name, "checkpoint");
  {
    NoGradGuard ng;
    EXPECT_FALSE(
        autograd::checkpoint([&](const std::vector<Tensor>& in) { return block(in[0], w, 0.0); },
                             {x.requires_grad_(true)})
            .requires_grad());
  }
  try {
    autograd::checkpoint([](const std::vector<Tensor>& in) { return argmax(in[0], 1); },
                         {randn({3, 4}).requires_grad_(true)});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint"), std::string::npos) << e.what();
  }
}

namespace {

// A GPT with dropout trained one step with and without activation checkpointing: the loss and
// every gradient bit for bit.
void expect_gpt_checkpointing_bit_for_bit(bool fused) {
  nn::GPTConfig c{
      .vocab_size = 37, .block_size = 16, .n_layer = 3, .n_head = 4, .n_embd = 32, .dropout = 0.1};
  manual_seed(11);
  nn::GPT plain(c);
  manual_seed(11);
  nn::GPT ckpt(c);
  if (fused) nn::fuse(plain), nn::fuse(ckpt);
  ckpt.set_activation_checkpointing(true);
  manual_seed(12);
  Tensor idx = randint(0, 37, {4, 16}), tgt = randint(0, 37, {4, 16});
  manual_seed(13);
  Tensor la = plain.loss(idx, tgt);
  la.backward();
  manual_seed(13);
  Tensor lb = ckpt.loss(idx, tgt);
  lb.backward();
  EXPECT_TRUE(bit_equal(la, lb));
  auto pa = plain.named_parameters(), pb = ckpt.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(bit_equal(pa[i].second.grad(), pb[i].second.grad())) << pa[i].first;
}

}  // namespace

// Plain, and fused by nn::fuse: there the blocks chained without checkpointing (each block's last
// add in the next layer norm) against each block alone when checkpointed.
TEST(Checkpoint, GptWithDropoutTrainsTheSameBitForBit) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "plain");
    expect_gpt_checkpointing_bit_for_bit(fused);
  }
}