// ZeRO stages 1 and 2 (distributed/zero/): the partition alone; in-process with a world of one
// (bitwise the plain optimizer); and real multi-process Gloo jobs of 2 and 3 ranks (zero_tool.cpp
// is the worker): the same weights as DDP, 1/N of the optimizer state (and of the gradients for
// stage 2), clipping and GradScaler decisions made over all ranks, gradient accumulation, and a
// checkpoint written by N ranks resumed by M (and by a run without ZeRO).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>

#include "../ddp/ddp_case.h"
#include "core/cuda/available.h"
#include "distributed/process_group/local_process_group.h"
#include "distributed/spawn.h"
#include "distributed/zero/zero_optimizer.h"
#include "nn/optim/adam.h"
#include "nn/serialize.h"
#include "zero_jobs.h"

using namespace loom;
using namespace loom::distributed;

using test::bitwise_equal;
using test::expect_ranks_agree;
using test::Job;
using test::run_zero;
using test::temp_dir;
using test::worst_diff;

// ---------------------------------------------------------------- the partition alone

TEST(ZeroPartition, EveryElementHasOneOwnerAndEveryRankTheSameCount) {
  const std::vector<BucketShape> buckets{{{5, 7, 1}, 13}, {{2}, 2}, {{4, 4, 4, 4}, 16}};
  for (int world : {1, 2, 3}) {
    std::vector<BucketShape> padded = buckets;  // as DDP pads: to the next multiple of N
    for (auto& b : padded) b.padded = (b.padded + world - 1) / world * world;
    std::vector<std::vector<std::vector<int>>> owners(padded.size());
    for (size_t b = 0; b < padded.size(); ++b)
      for (int64_t n : padded[b].numels) owners[b].emplace_back(size_t(n), 0);
    for (int r = 0; r < world; ++r) {
      int64_t mine = 0;
      for (const Segment& s : zero_segments(padded, r, world)) {
        EXPECT_GT(s.numel, 0);
        EXPECT_EQ(s.shard_offset,  // the element's flat position minus the rank's start
                  [&] {
                    int64_t off = 0;
                    for (size_t k = 0; k < s.slot; ++k) off += padded[s.bucket].numels[k];
                    return off + s.param_offset - r * (padded[s.bucket].padded / world);
                  }());
        for (int64_t e = 0; e < s.numel; ++e)
          owners[s.bucket][s.slot][size_t(s.param_offset + e)]++;
        mine += s.numel;
      }
      int64_t share = 0;
      for (const auto& b : padded) share += b.padded / world;
      EXPECT_LE(mine, share);  // its shards, less the padding in them
      EXPECT_GE(mine, share - int64_t(padded.size()) * (world - 1));
    }
    for (const auto& b : owners)
      for (const auto& p : b)
        for (int c : p) EXPECT_EQ(c, 1) << "world " << world;
  }
  // Two ranks of a 13-element bucket (padded to 14): the 7-element parameter straddles them.
  auto r1 = zero_segments({{{5, 7, 1}, 14}}, 1, 2);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].slot, 1u);
  EXPECT_EQ(r1[0].param_offset, 2);
  EXPECT_EQ(r1[0].numel, 5);
  EXPECT_EQ(r1[1].slot, 2u);
}

TEST(ZeroPartition, RejectsAPaddingThatIsNoMultipleOfTheWorld) {
  try {
    zero_segments({{{5, 7}, 12}}, 0, 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the world size 5"), std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- a world of one, in process

TEST(ZeroWorldOfOne, BitwiseThePlainOptimizerForBothStages) {
  for (int stage : {1, 2}) {
    auto plain = test::ddp_case_model(kF64, 100);
    auto model = test::ddp_case_model(kF64, 100);
    auto pg = std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
    DDPOptions o = ddp_options_for_zero(stage);
    o.reducer.first_bucket_cap_bytes = o.reducer.bucket_cap_bytes = 512;  // several buckets
    auto ddp = std::make_shared<DistributedDataParallel>(model, pg, o);
    optim::AdamW full(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
    optim::AdamW ref(plain->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
    ZeroOptimizer zero(*ddp, full);
    EXPECT_EQ(zero.name(), "ZeRO-" + std::to_string(stage) + " AdamW");
    for (int s = 0; s < 5; ++s) {
      auto [x, y] = test::ddp_case_batch(s, 8, kF64);
      zero.zero_grad();
      cross_entropy((*ddp)(x), y).backward();
      zero.step();
      ref.zero_grad();
      cross_entropy((*plain)(x), y).backward();
      ref.step();
    }
    EXPECT_TRUE(bitwise_equal(model->named_parameters(), plain->named_parameters()))
        << "stage " << stage << ": max diff "
        << worst_diff(model->named_parameters(), plain->named_parameters());
    // The gathered state is the plain optimizer's, entry for entry.
    auto a = zero.state_dict(), b = ref.state_dict();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(bitwise_equal(a, b)) << "stage " << stage;
    zero.set_lr(0.5);  // a scheduler's call reaches the shard's optimizer and the program's
    EXPECT_DOUBLE_EQ(zero.lr(0), 0.5);
    EXPECT_DOUBLE_EQ(full.lr(0), 0.5);
  }
}

TEST(ZeroErrors, StageThreeForDdpAndAPlainDdpAreRefusedByName) {
  try {
    ddp_options_for_zero(3);
    FAIL() << "expected an error";
  } catch (const Error& e) {  // stage 3 is another wrapper: the message says which
    EXPECT_NE(std::string(e.what()).find("FullyShardedDataParallel"), std::string::npos)
        << e.what();
  }
  auto model = test::ddp_case_model(kF32, 1);
  auto pg = std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
  DistributedDataParallel ddp(model, pg);
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  try {
    ZeroOptimizer z(ddp, sgd);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no ZeRO stage"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- NCCL, one rank

// On one GPU a one-rank NCCL group: ZeRO-1 and -2 give DDP's weights (float32: the same
// reduction on one rank, so the update's arithmetic is the same; 1e-6 leaves room for cuBLAS).
TEST(ZeroNccl, OneRankStagesOneAndTwoGiveDdpsWeights) {
#ifndef LOOM_WITH_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto job = [](int zero) {
    Job j{temp_dir(), {}};
    j.run = test::run_workers(
        LOOM_ZERO_TOOL, {"train", "f32", std::to_string(zero), "20", j.dir, "cap=512", "clip=0.5"},
        1, test::free_port(), {{"LOOM_TEST_BACKEND", "nccl"}}, 240);
    EXPECT_EQ(j.run.exit_codes[0], 0) << j.run.summary();
    return j;
  };
  Job ddp = job(0), z1 = job(1), z2 = job(2);
  EXPECT_LE(worst_diff(z1.final_of(0), ddp.final_of(0)), 1e-6);
  EXPECT_LE(worst_diff(z2.final_of(0), ddp.final_of(0)), 1e-6);
  EXPECT_NEAR(double(z2.value("state", 0)), double(z1.value("state", 0)), 1.0);
  for (auto* j : {&ddp, &z1, &z2}) std::filesystem::remove_all(j->dir);
#endif
}

// ---------------------------------------------------------------- Gloo jobs
#ifdef LOOM_WITH_GLOO

// 20 steps of AdamW (two groups) over several buckets: every stage on 2 and 3 ranks gives DDP's
// weights. float64: 1e-12 (the reduce-scatter may add the ranks' gradients in another order than
// the all-reduce; the update itself is the same arithmetic, element for element).
TEST(ZeroGloo, StagesOneAndTwoGiveDdpsWeightsOnTwoAndThreeRanks) {
  for (int world : {2, 3}) {
    Job ddp = run_zero(world, "f64", 0, 20, {"cap=512"});
    for (int stage : {1, 2}) {
      Job z = run_zero(world, "f64", stage, 20, {"cap=512"});
      expect_ranks_agree(z, world);
      EXPECT_LE(worst_diff(z.final_of(0), ddp.final_of(0)), 1e-12)
          << "stage " << stage << " on " << world << " ranks";
      std::filesystem::remove_all(z.dir);
    }
    std::filesystem::remove_all(ddp.dir);
  }
}

TEST(ZeroGloo, Float32AndSgdWithMomentumToo) {
  Job ddp = run_zero(2, "f32", 0, 20, {"cap=512"});
  Job z = run_zero(2, "f32", 2, 20, {"cap=512"});
  EXPECT_LE(worst_diff(z.final_of(0), ddp.final_of(0)), 1e-6);
  Job sgd_ddp = run_zero(3, "f64", 0, 20, {"opt=sgd"});
  Job sgd_z = run_zero(3, "f64", 1, 20, {"opt=sgd"});
  EXPECT_LE(worst_diff(sgd_z.final_of(0), sgd_ddp.final_of(0)), 1e-12);
  for (auto* j : {&ddp, &z, &sgd_ddp, &sgd_z}) std::filesystem::remove_all(j->dir);
}

// Per-rank bytes after the first step of a 8-512-512-4 MLP with AdamW (the closing note's table
// comes from this test's output): the state is 1/N of DDP's within the padding, stage 2's
// gradient too, and the allocator's live bytes fall accordingly.
TEST(ZeroGloo, StateAndGradientBytesPerRankAreOneNth) {
  Job ddp = run_zero(2, "f32", 0, 1, {"wide=1"});
  const int64_t params = 8 * 512 + 512 + 512 * 512 + 512 + 512 * 4 + 4;
  const int64_t param_bytes = params * 4, ddp_live = ddp.value("live", 0);
  EXPECT_GE(ddp_live, 4 * param_bytes);  // weights, gradients, exp_avg, exp_avg_sq
  std::printf("DDP: live %ld bytes per rank (%ld parameters)\n", long(ddp_live), long(params));
  for (int world : {1, 2, 3})
    for (int stage : {1, 2}) {
      Job z = run_zero(world, "f32", stage, 1, {"wide=1"});
      for (int r = 0; r < world; ++r) {
        const int64_t state = z.value("state", r), grads = z.value("grads", r);
        const int64_t pad = 8 * 4 * world;  // a few elements per bucket, two buffers
        EXPECT_NEAR(double(state), 2.0 * double(param_bytes) / world, double(pad))
            << "stage " << stage << " rank " << r << " of " << world;
        const double want_grads = (stage == 1 ? param_bytes : 0) + double(param_bytes) / world;
        EXPECT_NEAR(double(grads), want_grads, double(pad)) << "stage " << stage << " rank " << r;
        EXPECT_EQ(z.value("params", r), param_bytes);
        std::printf("ZeRO-%d, %d rank(s), rank %d: params %ld grads %ld state %ld live %ld\n",
                    stage, world, r, long(param_bytes), long(grads), long(state),
                    long(z.value("live", r)));
      }
      if (world == 2) {  // the allocator agrees: 4 -> 3.5 (stage 1) and 2.5 (stage 2) bytes
        const double want = stage == 1 ? 3.5 / 4 : 2.5 / 4;
        EXPECT_NEAR(double(z.value("live", 0)) / double(ddp_live), want, 0.05) << stage;
      }
      std::filesystem::remove_all(z.dir);
    }
  std::filesystem::remove_all(ddp.dir);
}

// Clipping by the global norm: each rank holds a third of the gradient, the norm is the whole's.
TEST(ZeroGloo, ClippingUsesTheNormOverAllRanks) {
  Job ddp = run_zero(3, "f64", 0, 10, {"clip=0.05"});
  Job z = run_zero(3, "f64", 2, 10, {"clip=0.05"});
  EXPECT_LE(worst_diff(z.final_of(0), ddp.final_of(0)), 1e-12);
  test::expect_same_clip_norms(ddp, z, 3, 0.05, 1e-5);
  std::filesystem::remove_all(ddp.dir);
  std::filesystem::remove_all(z.dir);
}

// An inf in one element that only rank 0 updates: every rank skips that step (fp16 autocast).
TEST(ZeroGloo, AnInfInOneRanksShardSkipsTheStepOnEveryRank) {
  for (int stage : {1, 2}) {
    Job z = run_zero(2, "f32", stage, 4, {"inf_at=2"});
    for (int r = 0; r < 2; ++r) EXPECT_EQ(z.value("skipped", r), 1) << "stage " << stage;
    expect_ranks_agree(z, 2);
    std::filesystem::remove_all(z.dir);
  }
}

// --grad-accum 4 (StepRunner) equals one batch four times as large.
TEST(ZeroGloo, FourAccumulatedMicroBatchesEqualOneLargeBatch) {
  Job big = run_zero(2, "f64", 0, 10, {"batch=48"});
  for (int stage : {1, 2}) {
    Job z = run_zero(2, "f64", stage, 10, {"batch=48", "accum=4"});
    EXPECT_LE(worst_diff(z.final_of(0), big.final_of(0)), 1e-12) << "stage " << stage;
    std::filesystem::remove_all(z.dir);
  }
  std::filesystem::remove_all(big.dir);
}

// Saved by 2 ranks at step 10 (stage 2), resumed by 3 ranks (stage 2) and by 1 (no ZeRO); both
// end where the uninterrupted run ends. The saved optimizer state equals DDP's at step 10.
TEST(ZeroGloo, ACheckpointOfTwoRanksResumesOnThreeAndOnOneWithoutZero) {
  Job whole = run_zero(2, "f64", 2, 20, {"save_at=10", "cap=512"});
  Job ddp = run_zero(2, "f64", 0, 10, {"save_at=10", "cap=512"});
  const std::string ckpt = whole.dir + "/ckpt.safetensors";
  auto zero_sd = load_safetensors(ckpt).tensors,
       ddp_sd = load_safetensors(ddp.dir + "/ckpt.safetensors").tensors;
  EXPECT_LE(worst_diff(zero_sd, ddp_sd), 1e-12);
  Job three = run_zero(3, "f64", 2, 20, {"load=" + ckpt, "cap=512"});
  Job one = run_zero(1, "f64", 0, 20, {"load=" + ckpt});
  Job one_z1 = run_zero(1, "f64", 1, 20, {"load=" + ckpt});
  EXPECT_LE(worst_diff(three.final_of(0), whole.final_of(0)), 1e-12);
  EXPECT_LE(worst_diff(one.final_of(0), whole.final_of(0)), 1e-12);
  EXPECT_LE(worst_diff(one_z1.final_of(0), whole.final_of(0)), 1e-12);
  for (auto* j : {&whole, &ddp, &three, &one, &one_z1}) std::filesystem::remove_all(j->dir);
}
#endif  // LOOM_WITH_GLOO
