// ZeRO-3 (distributed/fsdp/): in-process with a world of one (how the model is cut into units,
// bitwise the plain model and optimizer, parameters released between units and a clear error when
// one is read there, activation checkpointing, evaluation without grad), and real multi-process
// Gloo jobs of 2 and 3 ranks (zero_tool.cpp is the worker): DDP's weights for an MLP and a tiny
// GPT, 1/N of the parameters, gradients and optimizer state per rank, clipping and GradScaler
// decisions over all ranks, gradient accumulation, checkpoints resumed on other world sizes
// and other stages, and mixed precision against bf16 autocast and its written-out arithmetic
// (the reduction itself: test_fsdp_mixed_precision.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "../ddp/ddp_case.h"
#include "../zero/zero_jobs.h"
#include "core/allocator.h"
#include "core/cuda/available.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/process_group/local_process_group.h"
#include "distributed/zero/zero_optimizer.h"
#include "nn/fuse.h"
#include "nn/gpt.h"
#include "nn/optim/adam.h"

using namespace loom;
using namespace loom::distributed;
using test::bitwise_equal;
using test::expect_ranks_agree;
using test::Job;
using test::run_zero;
using test::worst_diff;

namespace {

std::shared_ptr<nn::GPT> tiny_gpt(uint64_t seed, bool checkpointing = false, double dropout = 0,
                                  bool fused = false) {
  manual_seed(seed);
  auto m = std::make_shared<nn::GPT>(nn::GPTConfig{.vocab_size = 16,
                                                   .block_size = 8,
                                                   .n_layer = 2,
                                                   .n_head = 2,
                                                   .n_embd = 16,
                                                   .dropout = dropout});
  if (fused) nn::fuse(*m);  // FusedTransformerBlocks, chained (nn/fuse_transformer.h)
  m->set_activation_checkpointing(checkpointing);
  return m;
}

std::pair<Tensor, Tensor> tokens(int64_t step) {
  Generator g(500 + uint64_t(step));
  Tensor ids = randint(0, 16, {4, 8}, {.dtype = DType::I64}, &g);
  return {ids, randint(0, 16, {4, 8}, {.dtype = DType::I64}, &g)};
}

Tensor gpt_loss(nn::Module& net, const std::pair<Tensor, Tensor>& b) {
  return cross_entropy(flatten(net(b.first), 0, 1), flatten(b.second));
}

std::shared_ptr<LocalProcessGroup> one_rank() {
  return std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
}

// A copy of the model's parameters, gathered.
NamedTensors whole_params(FullyShardedDataParallel& f, nn::Module& m) {
  auto scope = f.full_params();
  NamedTensors out;
  for (auto& [k, t] : m.named_parameters()) out.emplace_back(k, t.clone());
  return out;
}

}  // namespace

// ---------------------------------------------------------------- a world of one, in process

TEST(FsdpUnits, BlocksAndLinearsBecomeUnitsAndTheTiedEmbeddingStaysInTheRoot) {
  auto gpt = tiny_gpt(1);
  FullyShardedDataParallel f(gpt, one_rank());
  // lm_head (a Linear) holds only wte.weight, which the root's embedding uses too: no unit.
  EXPECT_EQ(f.unit_names(), (std::vector<std::string>{"", "h.0", "h.1"}));
  auto mlp = test::ddp_case_model(kF32, 1);
  FullyShardedDataParallel g(mlp, one_rank());
  EXPECT_EQ(g.unit_names(), (std::vector<std::string>{"", "0", "2", "4"}));
  EXPECT_EQ(g.buckets()[0].params.size(), 0u);  // the root holds nothing
  // state_dict names are the model's, as with DDP.
  auto scope = g.full_params();
  EXPECT_EQ(g.state_dict().size(), mlp->state_dict().size());
  EXPECT_EQ(g.state_dict()[0].first, "0.weight");
}

// One rank: FSDP with a stage-3 ZeroOptimizer is the plain model and optimizer, bit for bit
// (the same kernels on the same values; the gradient goes through a flat buffer unchanged).
TEST(FsdpWorldOfOne, BitwiseThePlainModelAndOptimizer) {
  for (bool checkpointing : {false, true}) {
    auto plain = tiny_gpt(7, checkpointing), model = tiny_gpt(7, checkpointing);
    FullyShardedDataParallel f(model, one_rank());
    optim::AdamW full(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
    optim::AdamW ref(plain->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
    ZeroOptimizer zero(f, full);
    EXPECT_EQ(zero.name(), "ZeRO-3 AdamW");
    for (int s = 0; s < 5; ++s) {
      zero.zero_grad();
      gpt_loss(f, tokens(s)).backward();
      zero.step();
      ref.zero_grad();
      gpt_loss(*plain, tokens(s)).backward();
      ref.step();
    }
    EXPECT_TRUE(bitwise_equal(whole_params(f, *model), plain->named_parameters()))
        << "checkpointing " << checkpointing << ": max diff "
        << worst_diff(whole_params(f, *model), plain->named_parameters());
    auto a = zero.state_dict(), b = ref.state_dict();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(bitwise_equal(a, b))
        << "the gathered optimizer state, checkpointing " << checkpointing;
  }
}

// The fused GPT (nn::fuse): its FusedTransformerBlocks are the units, gathered by the hooks of
// forward_parts in the chain and of forward when checkpointed; one rank is the same fused model
// without FSDP, bit for bit.
TEST(FsdpWorldOfOne, TheFusedGptsBlocksAreUnitsAndTrainAsWithoutFsdp) {
  for (bool checkpointing : {false, true}) {
    auto plain = tiny_gpt(7, checkpointing, 0, true), model = tiny_gpt(7, checkpointing, 0, true);
    FullyShardedDataParallel f(model, one_rank());
    EXPECT_EQ(f.unit_names(), (std::vector<std::string>{"", "h.0", "h.1"}));
    optim::AdamW full(model->parameters(), {.lr = 1e-2});
    optim::AdamW ref(plain->parameters(), {.lr = 1e-2});
    ZeroOptimizer zero(f, full);
    for (int s = 0; s < 3; ++s) {
      zero.zero_grad();
      gpt_loss(f, tokens(s)).backward();
      zero.step();
      ref.zero_grad();
      gpt_loss(*plain, tokens(s)).backward();
      ref.step();
    }
    EXPECT_TRUE(bitwise_equal(whole_params(f, *model), plain->named_parameters()))
        << "checkpointing " << checkpointing << ": max diff "
        << worst_diff(whole_params(f, *model), plain->named_parameters());
  }
}

// Between units nothing is whole: the parameters' memory is released, and reading one is an
// error that names it and says what to do.
TEST(FsdpWorldOfOne, ParametersAreReleasedBetweenUnitsAndReadingOneIsAClearError) {
  auto model = tiny_gpt(3);
  FullyShardedDataParallel f(model, one_rank());
  int64_t shards = 0;
  for (size_t u = 0; u < f.buckets().size(); ++u) shards += f.value_shard(u).numel() * 4;
  EXPECT_EQ(f.parameter_bytes(), shards);
  gpt_loss(f, tokens(0)).backward();
  EXPECT_EQ(f.parameter_bytes(), shards) << "every unit released after backward";
  EXPECT_TRUE(model->h->at<nn::TransformerBlock>(0)->attn->c_attn->weight.storage()->released());
  Tensor ln_f_weight = model->ln_f->named_parameters()[0].second;
  try {
    (void)ln_f_weight.sum();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("FSDP unit '' (the root: wte.weight, wpe.weight, ln_f.weight, ...)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("released"), std::string::npos) << m;
    EXPECT_NE(m.find("full_params"), std::string::npos) << m;
  }
  // Inside FullParams it is whole; a load with writeback reaches the shards.
  {
    auto scope = f.full_params(/*writeback=*/true);
    NoGradGuard no_grad;
    ln_f_weight.fill_(0.5);
  }
  auto w = whole_params(f, *model);
  for (auto& [k, t] : w)
    if (k == "ln_f.weight") {
      EXPECT_EQ(max(t).item(), 0.5);
    }
}

// A forward without grad (evaluation) gathers each unit for its forward only and releases the
// root at the end; its output equals the plain model's.
TEST(FsdpWorldOfOne, EvaluationWithoutGradMatchesAndReleasesEverything) {
  auto plain = tiny_gpt(5), model = tiny_gpt(5);
  FullyShardedDataParallel f(model, one_rank());
  NoGradGuard no_grad;
  Tensor a = f(tokens(1).first), b = (*plain)(tokens(1).first);
  EXPECT_EQ(max(abs(a - b)).item(), 0.0);
  int64_t shards = 0;
  for (size_t u = 0; u < f.buckets().size(); ++u) shards += f.value_shard(u).numel() * 4;
  EXPECT_EQ(f.parameter_bytes(), shards);
}

// Note [FSDP mixed precision]: with param_dtype bf16 the forward is the plain model's in bf16,
// bit for bit (the same kernels on the master's bf16 rounding); the master stays fp32 and is what
// FullParams shows (and checkpoints save); one step moves the loss like the plain bf16 model's.
TEST(FsdpWorldOfOne, MixedPrecisionComputesWithTheMastersBf16Rounding) {
  auto model = tiny_gpt(11), plain = tiny_gpt(11);
  plain->to(kBF16);
  FullyShardedDataParallel f(model, one_rank(), {.param_dtype = kBF16});
  const auto batch = tokens(2);
  {
    NoGradGuard no_grad;
    Tensor a = f(batch.first), b = (*plain)(batch.first);
    ASSERT_EQ(a.dtype(), kBF16);
    EXPECT_EQ(max(abs(a.to(kF32) - b.to(kF32))).item(), 0.0);
  }
  optim::AdamW full(model->parameters(), {.lr = 1e-2});
  ZeroOptimizer zero(f, full);
  for (int s = 0; s < 3; ++s) {
    zero.zero_grad();
    gpt_loss(f, tokens(s)).backward();
    zero.step();
  }
  for (size_t u = 0; u < f.buckets().size(); ++u) {
    EXPECT_EQ(f.value_shard(u).dtype(), kF32) << "the master shard";
    EXPECT_EQ(f.buckets()[u].shard.dtype(), kF32) << "the reduced gradient";
  }
  auto whole = f.full_params();
  for (auto& [k, t] : model->named_parameters()) EXPECT_EQ(t.dtype(), kF32) << k;
  // The master moved by AdamW in fp32: not a bf16 value any more (a bf16 master could not).
  Tensor w = model->h->at<nn::TransformerBlock>(0)->attn->c_attn->weight;
  EXPECT_GT(max(abs(w - w.to(kBF16).to(kF32))).item(), 0.0);
}

// ---------------------------------------------------------------- NCCL, one rank

// On one GPU a one-rank NCCL group: ZeRO-3 gives DDP's weights for the MLP and the tiny GPT
// (float32; 1e-6 leaves room for cuBLAS), with clipping on.
TEST(FsdpNccl, OneRankStageThreeGivesDdpsWeights) {
#ifndef LOOM_WITH_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (bool gpt : {false, true}) {
    auto job = [&](int zero) {
      Job j{test::temp_dir(), {}};
      std::vector<std::string> args{"train", "f32", std::to_string(zero), "20", j.dir, "clip=0.5"};
      if (gpt) args.push_back("gpt=1");
      j.run = test::run_workers(LOOM_ZERO_TOOL, args, 1, test::free_port(),
                                {{"LOOM_TEST_BACKEND", "nccl"}}, 240);
      EXPECT_EQ(j.run.exit_codes[0], 0) << j.run.summary();
      return j;
    };
    Job ddp = job(0), z3 = job(3);
    EXPECT_LE(worst_diff(z3.final_of(0), ddp.final_of(0)), 1e-6) << (gpt ? "gpt" : "mlp");
    for (auto* j : {&ddp, &z3}) std::filesystem::remove_all(j->dir);
  }
#endif
}

// ---------------------------------------------------------------- Gloo jobs
#ifdef LOOM_WITH_GLOO

// 20 steps of AdamW (two groups): ZeRO-3 on 2 and 3 ranks gives DDP's weights, for the MLP and a
// tiny GPT (tied embedding in the root, two block units; float64: 1e-12, the reduce-scatter may
// add the ranks' gradients in another order than the all-reduce).
TEST(FsdpGloo, StageThreeGivesDdpsWeightsOnTwoAndThreeRanks) {
  for (int world : {2, 3})
    for (bool gpt : {false, true}) {
      std::vector<std::string> extra;
      if (gpt) extra.push_back("gpt=1");
      Job ddp = run_zero(world, "f64", 0, 20, extra);
      Job z = run_zero(world, "f64", 3, 20, extra);
      expect_ranks_agree(z, world);
      EXPECT_LE(worst_diff(z.final_of(0), ddp.final_of(0)), 1e-12)
          << (gpt ? "gpt" : "mlp") << " on " << world << " ranks";
      for (auto* j : {&ddp, &z}) std::filesystem::remove_all(j->dir);
    }
}

// Float32 (1e-6), SGD with momentum, and the GPT with activation checkpointing.
TEST(FsdpGloo, Float32SgdAndActivationCheckpointingToo) {
  Job ddp = run_zero(2, "f32", 0, 20, {});
  Job z = run_zero(2, "f32", 3, 20, {});
  EXPECT_LE(worst_diff(z.final_of(0), ddp.final_of(0)), 1e-6);
  Job sgd_ddp = run_zero(3, "f64", 0, 20, {"opt=sgd"});
  Job sgd_z = run_zero(3, "f64", 3, 20, {"opt=sgd"});
  EXPECT_LE(worst_diff(sgd_z.final_of(0), sgd_ddp.final_of(0)), 1e-12);
  Job gpt_ddp = run_zero(2, "f64", 0, 10, {"gpt=1"});
  Job gpt_ckpt = run_zero(2, "f64", 3, 10, {"gpt=1", "ckpt=1"});
  EXPECT_LE(worst_diff(gpt_ckpt.final_of(0), gpt_ddp.final_of(0)), 1e-12);
  for (auto* j : {&ddp, &z, &sgd_ddp, &sgd_z, &gpt_ddp, &gpt_ckpt})
    std::filesystem::remove_all(j->dir);
}

// Per-rank bytes after the first step of the 8-512-512-4 MLP with AdamW: parameters, gradients
// and optimizer state are each 1/N of DDP's within the padding, and the allocator's live bytes
// fall accordingly (the closing note's table comes from this output).
TEST(FsdpGloo, ParametersGradientsAndStateAreOneNthPerRank) {
  const int64_t params = 8 * 512 + 512 + 512 * 512 + 512 + 512 * 4 + 4;
  const int64_t param_bytes = params * 4;
  Job ddp = run_zero(2, "f32", 0, 1, {"wide=1"});
  const int64_t ddp_live = ddp.value("live", 0);
  for (int world : {1, 2, 3}) {
    Job z = run_zero(world, "f32", 3, 1, {"wide=1"});
    for (int r = 0; r < world; ++r) {
      const double pad = 4.0 * 4 * world;  // under N elements per unit, four units
      EXPECT_NEAR(double(z.value("params", r)), double(param_bytes) / world, pad) << world;
      EXPECT_NEAR(double(z.value("grads", r)), double(param_bytes) / world, pad) << world;
      EXPECT_NEAR(double(z.value("state", r)), 2.0 * double(param_bytes) / world, 2 * pad);
      std::printf("ZeRO-3, %d rank(s), rank %d: params %ld grads %ld state %ld live %ld\n", world,
                  r, long(z.value("params", r)), long(z.value("grads", r)),
                  long(z.value("state", r)), long(z.value("live", r)));
    }
    if (world == 2) {  // DDP holds 4 copies' worth (weights, gradients, two moments): 4 -> 2
      EXPECT_NEAR(double(z.value("live", 0)) / double(ddp_live), 0.5, 0.05);
    }
    std::filesystem::remove_all(z.dir);
  }
  std::filesystem::remove_all(ddp.dir);
}

// Mixed precision on 2 and 3 ranks: the same training as DDP under bf16 autocast (the last loss
// within 1%: measured 0.09%), the ranks agreeing bit for bit, the saved weights fp32, and each run
// where the arithmetic of Note [FSDP mixed precision] (fsdp.h), written out in one process
// (zero_tool mp_reference), ends: 3 ranks within Note [Mixed precision on three ranks], 2 ranks bit
// for bit (test_fsdp_mixed_precision.cpp). The 2- and 3-rank runs are not compared with each
// other: they differ by 0.019, and so do their written-out references, bf16 gradients over other
// row splits; a bound on that measures the problem, not FSDP.
// Note [Mixed precision on three ranks]
// The reference adds the three ranks' float32 gradient terms in rank order, Gloo's ring in its own:
// the means differ by float32 rounding, at most 2u (sum |g_r|) / 3 with u = 2^-24. AdamW divides
// by the gradient's running RMS, so that changes an update by about lr 2u = 3.6e-10 (20 steps:
// 7e-9, and more where the ranks' terms cancel); where it tips the bf16 rounding of a master the
// gathered weight moves by one bf16 step, 2^-8 relative, and the later updates it touches by about
// lr 2^-8 = 1.2e-5 a step, 2.3e-4 over 20 steps. Measured with GCC: 2e-8, and up to 2.3e-7
// between references that add in other orders; with clang under ASan (CI's sanitizer build, other
// vectorisation and contraction of the same float32 sums) 1.2e-3: several tipped roundings. The
// bound, 5e-3, allows about 20 of them; a bf16 rounding of any reduced quantity from the first
// step on is still 4x outside it (a bf16 reduce-scatter: 0.022).
TEST(FsdpGloo, MixedPrecisionTrainsLikeBf16Autocast) {
  auto loss = [](const Job& j) {
    const std::string& out = j.run.output[0];
    return std::stod(out.substr(out.find("last loss ") + 10));
  };
  Job ddp = run_zero(2, "f32", 0, 20, {"gpt=1", "mp=bf16"});
  Job two = run_zero(2, "f32", 3, 20, {"gpt=1", "mp=bf16"});
  Job three = run_zero(3, "f32", 3, 20, {"gpt=1", "mp=bf16"});
  EXPECT_NEAR(loss(two), loss(ddp), 0.01 * loss(ddp));
  EXPECT_NEAR(loss(three), loss(two), 0.01 * loss(two));
  EXPECT_LT(loss(two), 2.5) << "it trained (the first loss is about ln 16 = 2.77)";
  expect_ranks_agree(three, 3);
  for (auto& [k, t] : two.final_of(0)) EXPECT_EQ(t.dtype(), kF32) << k;
  EXPECT_LE(worst_diff(three.final_of(0), test::mp_reference(3, 20)), 5e-3);
  for (auto* j : {&ddp, &two, &three}) std::filesystem::remove_all(j->dir);
}

// Clipping by the global norm over the shards, and an inf in one rank's shard skipping the step
// on every rank.
TEST(FsdpGloo, ClippingAndGradScalerDecisionsAreTheSameOnEveryRank) {
  Job ddp = run_zero(3, "f64", 0, 10, {"clip=0.05"});
  Job z = run_zero(3, "f64", 3, 10, {"clip=0.05"});
  EXPECT_LE(worst_diff(z.final_of(0), ddp.final_of(0)), 1e-12);
  test::expect_same_clip_norms(ddp, z, 3, 0.05, 1e-9);
  Job inf = run_zero(2, "f32", 3, 4, {"inf_at=2"});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(inf.value("skipped", r), 1);
  expect_ranks_agree(inf, 2);
  for (auto* j : {&ddp, &z, &inf}) std::filesystem::remove_all(j->dir);
}

// --grad-accum 4 (StepRunner) equals one batch four times as large: each micro-batch is
// reduce-scattered and the shards add up.
TEST(FsdpGloo, FourAccumulatedMicroBatchesEqualOneLargeBatch) {
  Job big = run_zero(2, "f64", 0, 10, {"batch=48"});
  Job z = run_zero(2, "f64", 3, 10, {"batch=48", "accum=4"});
  EXPECT_LE(worst_diff(z.final_of(0), big.final_of(0)), 1e-12);
  for (auto* j : {&big, &z}) std::filesystem::remove_all(j->dir);
}

// Saved by 2 ranks of ZeRO-3 at step 10 (gathered: the same file DDP writes), resumed by 3 ranks
// of ZeRO-3, by 1 without ZeRO and by 2 of ZeRO-2; each ends where the uninterrupted run ends.
// And a DDP checkpoint resumes under ZeRO-3.
TEST(FsdpGloo, CheckpointsMoveBetweenWorldSizesAndStages) {
  Job whole = run_zero(2, "f64", 3, 20, {"save_at=10"});
  Job ddp = run_zero(2, "f64", 0, 20, {"save_at=10"});
  const std::string ckpt = whole.dir + "/ckpt.safetensors";
  EXPECT_LE(worst_diff(load_safetensors(ckpt).tensors,
                       load_safetensors(ddp.dir + "/ckpt.safetensors").tensors),
            1e-12);
  Job three = run_zero(3, "f64", 3, 20, {"load=" + ckpt});
  Job one = run_zero(1, "f64", 0, 20, {"load=" + ckpt});
  Job two_z2 = run_zero(2, "f64", 2, 20, {"load=" + ckpt});
  Job from_ddp = run_zero(3, "f64", 3, 20, {"load=" + ddp.dir + "/ckpt.safetensors"});
  for (Job* j : {&three, &one, &two_z2, &from_ddp})
    EXPECT_LE(worst_diff(j->final_of(0), whole.final_of(0)), 1e-12) << j->run.summary();
  for (auto* j : {&whole, &ddp, &three, &one, &two_z2, &from_ddp})
    std::filesystem::remove_all(j->dir);
}
#endif  // LOOM_WITH_GLOO
