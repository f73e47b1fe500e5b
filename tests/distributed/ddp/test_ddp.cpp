// DistributedDataParallel in real multi-process jobs over Gloo (ddp_tool.cpp is the worker): the
// same weights on every rank after construction and after 20 steps (bitwise), equal to one
// process on the concatenated batches, no_sync, unused parameters, errors, join; the bucket
// assignment; a world of one. NCCL: the same equivalence on two GPUs (skipped below two).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/cuda/available.h"
#include "ddp_case.h"
#include "distributed/ddp/ddp.h"
#include "distributed/ddp/ddp_buckets.h"
#include "distributed/local_process_group.h"
#include "distributed/spawn.h"
#include "distributed/world.h"
#include "nn/serialize.h"

using namespace loom;
using namespace loom::distributed;

namespace {

[[maybe_unused]] std::string temp_dir() {
  char t[] = "/tmp/loom-ddp-XXXXXX";
  return mkdtemp(t);
}

[[maybe_unused]] NamedTensors load(const std::string& dir, const std::string& what, int rank) {
  return load_safetensors(dir + "/" + what + "_rank" + std::to_string(rank) + ".safetensors")
      .tensors;
}

[[maybe_unused]] double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard g;
  return max(abs(a.detach().to(kF64) - b.detach().to(kF64))).item();
}

[[maybe_unused]] void expect_bitwise_equal(const NamedTensors& a, const NamedTensors& b,
                                           const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first) << what;
    const Tensor &x = a[i].second, &y = b[i].second;
    ASSERT_EQ(x.numel(), y.numel()) << what << " " << a[i].first;
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()), 0)
        << what << ": " << a[i].first << " differs (max |diff| " << max_abs_diff(x, y) << ")";
  }
}

// One process on the whole global batch: the run DDP must reproduce.
[[maybe_unused]] NamedTensors reference(DType dt, int world, int micro, int steps,
                                        bool init_only = false) {
  auto model = test::ddp_case_model(dt, 100);
  if (init_only) return model->named_parameters();
  auto sgd = test::ddp_case_optimizer(*model);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, int64_t(world) * micro * 4, dt);
    sgd->zero_grad();
    cross_entropy((*model)(x), y).backward();
    sgd->step();
  }
  return model->named_parameters();
}

[[maybe_unused]] void expect_all_ok(const test::WorkerRun& run) {
  ASSERT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < run.exit_codes.size(); ++r)
    ASSERT_EQ(run.exit_codes[r], 0) << "rank " << r << "\n" << run.summary();
}

[[maybe_unused]] void expect_all_failed_with(const test::WorkerRun& run,
                                             const std::vector<std::string>& parts) {
  ASSERT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < run.exit_codes.size(); ++r) {
    EXPECT_EQ(run.exit_codes[r], 3) << "rank " << r << "\n" << run.summary();
    for (const auto& p : parts)
      EXPECT_NE(run.output[r].find(p), std::string::npos)
          << "rank " << r << " lacks '" << p << "'\n"
          << run.summary();
  }
}

// Runs ddp_tool train on `world` ranks and checks the whole contract against the reference.
[[maybe_unused]] void check_training(
    const std::string& backend, int world, DType dt, int micro, int steps,
    const std::vector<std::string>& extra, double tol,
    const std::function<void(const std::string&, int)>& also = nullptr) {
  std::string dir = temp_dir();
  std::vector<std::string> args{"train", dt == kF64 ? "f64" : "f32", std::to_string(steps), dir,
                                "micro=" + std::to_string(micro)};
  args.insert(args.end(), extra.begin(), extra.end());
  auto run = test::run_workers(LOOM_DDP_TOOL, args, world, test::free_port(),
                               {{"LOOM_TEST_BACKEND", backend}}, 240);
  expect_all_ok(run);
  // Construction: every rank has rank 0's weights (seeded 100), although each built its own.
  NamedTensors init_ref = reference(dt, world, micro, steps, true);
  for (int r = 0; r < world; ++r)
    expect_bitwise_equal(load(dir, "init", r), init_ref, "init rank " + std::to_string(r));
  // After training: bitwise equal across ranks, and equal to one process within tolerance.
  NamedTensors final0 = load(dir, "final", 0);
  for (int r = 1; r < world; ++r)
    expect_bitwise_equal(load(dir, "final", r), final0, "final rank " + std::to_string(r));
  NamedTensors ref = reference(dt, world, micro, steps);
  double worst = 0, moved = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, max_abs_diff(final0[i].second, ref[i].second));
    moved = std::max(moved, max_abs_diff(init_ref[i].second, ref[i].second));
  }
  EXPECT_LE(worst, tol) << "DDP on " << world << " ranks vs one process";
  EXPECT_GT(moved, std::min(100 * tol, 1e-2))
      << "the weights must move for the comparison to mean anything";
  bool small_buckets = std::find(extra.begin(), extra.end(), "cap=512") != extra.end();
  if (small_buckets) {  // several buckets, rebuilt once in arrival order
    EXPECT_NE(run.output[0].find("rebuilt 1"), std::string::npos) << run.output[0];
    EXPECT_EQ(run.output[0].find("buckets 1 "), std::string::npos) << run.output[0];
  }
  if (also) also(dir, world);
  std::filesystem::remove_all(dir);
}

// Inside no_sync a rank's .grad is its own micro-batch's gradient (no communication): equal to
// one process's gradient on that rank's rows, and different between the ranks.
[[maybe_unused]] void check_no_sync_grads(const std::string& dir, int world) {
  for (int r = 0; r < world; ++r) {
    auto model = test::ddp_case_model(kF64, 100);
    auto [x, y] = test::ddp_case_batch(0, int64_t(world) * 4 * 4, kF64);
    int64_t lo = int64_t(r) * 16;
    (cross_entropy((*model)(x.slice(0, lo, lo + 4)), y.slice(0, lo, lo + 4)) * 0.25).backward();
    auto saved = load(dir, "nosync_grad", r);
    auto params = model->named_parameters();
    ASSERT_EQ(saved.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_LE(max_abs_diff(saved[i].second, params[i].second.grad()), 1e-14)
          << "rank " << r << " " << params[i].first;
  }
  EXPECT_GT(
      max_abs_diff(load(dir, "nosync_grad", 0)[0].second, load(dir, "nosync_grad", 1)[0].second),
      1e-6)
      << "inside no_sync the ranks' gradients must still differ";
}

#ifdef LOOM_WITH_GLOO
struct Case {
  int world;
  DType dt;
};
class DDPGloo : public ::testing::TestWithParam<Case> {};

TEST_P(DDPGloo, TwentyStepsEqualOneProcessOnTheConcatenatedBatches) {
  auto [world, dt] = GetParam();
  // 512-byte buckets: several buckets, launched as they fill, rebuilt after the first step.
  check_training("gloo", world, dt, 1, 20, {"cap=512"}, dt == kF64 ? 1e-12 : 1e-5);
}
INSTANTIATE_TEST_SUITE_P(Processes, DDPGloo,
                         ::testing::Values(Case{2, kF32}, Case{3, kF32}, Case{2, kF64},
                                           Case{3, kF64}),
                         [](const auto& info) {
                           return std::to_string(info.param.world) + "ranks_" +
                                  dtype_name(info.param.dt);
                         });

TEST(DDPGlooNoSync, FourMicroStepsEqualOneLargeBatch) {
  check_training("gloo", 2, kF64, 4, 5, {"cap=512"}, 1e-12, check_no_sync_grads);
}

TEST(DDPGlooCompression, Bf16GradientsStayCloseAndIdenticalAcrossRanks) {
  check_training("gloo", 2, kF32, 1, 20, {"comm=bf16"}, 2e-2);
}

TEST(DDPGlooUnused, FindUnusedParametersReducesWhatWasUsedAndSkipsTheRest) {
  std::string dir = temp_dir();
  auto run = test::run_workers(LOOM_DDP_TOOL, {"unused", "1", dir}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(run);
  auto a = load(dir, "unused", 0), b = load(dir, "unused", 1);
  expect_bitwise_equal(a, b, "find_unused_parameters");
  // 'some' was used on rank 1 only: its mean gradient moved it on both ranks; 'never' stayed.
  manual_seed(7);
  nn::Linear fc(test::kIn, test::kClasses), some(test::kIn, test::kClasses),
      never(test::kIn, test::kClasses);
  for (auto& [n, t] : a) {
    if (n == "never.weight") {
      EXPECT_EQ(max_abs_diff(t, never.weight), 0.0);
    }
    if (n == "some.weight") {
      EXPECT_GT(max_abs_diff(t, some.weight), 1e-4);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(DDPGlooUnused, WithoutItTheNextForwardNamesTheParameters) {
  auto run = test::run_workers(LOOM_DDP_TOOL, {"unused", "0", "/tmp"}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_failed_with(run, {"'some.weight'", "'never.bias'", "find_unused_parameters = true",
                               "previous backward finished without a gradient for 4 parameter(s)"});
  EXPECT_NE(run.output[1].find("rank 1 of 2"), std::string::npos) << run.summary();
}

TEST(DDPGlooErrors, DifferentModelsNameTheFirstMismatchAndTheRanks) {
  auto run = test::run_workers(LOOM_DDP_TOOL, {"mismatch"}, 3, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_failed_with(
      run, {"the model differs across ranks", "parameter '0.weight' float32 [4, 8] on rank 0",
            "parameter '0.weight' float32 [5, 8] on rank(s) 1"});
}

TEST(DDPGlooErrors, TheConsistencyCheckNamesTheDivergedParameterAndRank) {
  auto run = test::run_workers(LOOM_DDP_TOOL, {"consistency"}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_failed_with(run,
                         {"step 2:", "parameter '2.bias' differs between rank 0 and rank(s) 1"});
}

TEST(DDPGlooGradScaler, AnInfOnOneRankSkipsTheStepOnEveryRank) {
  std::string dir = temp_dir();
  auto run = test::run_workers(LOOM_DDP_TOOL, {"scaler", dir}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(run);
  // Rank 1 alone saw the inf (step 2); after the all-reduce both ranks skip that step alone and
  // halve the scale once.
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(run.output[size_t(r)].find("decisions 11011 scale 512"), std::string::npos)
        << "rank " << r << ": " << run.summary();
  expect_bitwise_equal(load(dir, "scaler", 0), load(dir, "scaler", 1), "scaler");
  std::filesystem::remove_all(dir);
}

TEST(DDPGlooJoin, UnevenInputsFinishAndAgree) {
  std::string dir = temp_dir();
  auto run = test::run_workers(LOOM_DDP_TOOL, {"join", dir}, 3, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(run);
  auto a = load(dir, "join", 0);
  for (int r = 1; r < 3; ++r)
    expect_bitwise_equal(load(dir, "join", r), a, "join rank " + std::to_string(r));
  std::filesystem::remove_all(dir);
}
#endif

TEST(DDPNccl, TwentyStepsEqualOneProcessOnTwoGpus) {
#ifndef LOOM_WITH_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda::device_count();
  // TF32 is off by default in loom, so float32 on the GPU is comparable to the CPU reference at a
  // looser tolerance (different summation orders in cuBLAS); f64 keeps 1e-12.
  check_training("nccl", 2, kF32, 1, 20, {"cap=512"}, 1e-5);
  check_training("nccl", 2, kF64, 1, 20, {"cap=512"}, 1e-12);
  check_training("nccl", 2, kF64, 4, 5, {"cap=512"}, 1e-12, check_no_sync_grads);
  check_training("nccl", 2, kF32, 1, 20, {"comm=bf16"}, 2e-2);
#endif
}

// ---------------------------------------------------------------- in one process

TEST(DDPBuckets, CapsOrderAndGroups) {
  // Sizes in float32 elements; order: reverse registration.
  std::vector<ParamLayout> p{
      {100, kF32, kCPU}, {300, kF32, kCPU}, {50, kF64, kCPU}, {200, kF32, kCPU}, {10, kF32, kCPU}};
  std::vector<size_t> order{4, 3, 2, 1, 0};
  // First cap 800 bytes (200 floats), then 1600 bytes.
  auto a = compute_bucket_assignment(p, order, 800, 1600);
  // f32: 4 (40 B), 3 (840 B: closes the first bucket), then 1 + 0 (1600 B: closes); f64: 2.
  std::vector<std::vector<size_t>> want{{4, 3}, {2}, {1, 0}};
  EXPECT_EQ(a, want);
  // A different agreed order gives buckets in that order.
  auto b = compute_bucket_assignment(p, {0, 1, 2, 3, 4}, 800, 1600);
  std::vector<std::vector<size_t>> want_b{{0, 1}, {2}, {3, 4}};
  EXPECT_EQ(b, want_b);
  EXPECT_THROW(compute_bucket_assignment(p, {0, 0, 1, 2, 3}, 800, 1600), Error);
}

TEST(DDPWorldOfOne, SameNamesAndTheSameTrainingAsThePlainModel) {
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  auto pg = init_process_group();
  auto plain = test::ddp_case_model(kF64, 3);
  auto inner = test::ddp_case_model(kF64, 3);
  auto ddp = std::make_shared<DistributedDataParallel>(inner);
  auto names = [](const nn::StateDict& sd) {
    std::vector<std::string> n;
    for (auto& [k, v] : sd) n.push_back(k);
    return n;
  };
  EXPECT_EQ(names(ddp->state_dict()), names(plain->state_dict()));
  auto s1 = test::ddp_case_optimizer(*plain), s2 = test::ddp_case_optimizer(*ddp);
  for (int s = 0; s < 5; ++s) {
    auto [x, y] = test::ddp_case_batch(s, 8, kF64);
    s1->zero_grad();
    s2->zero_grad();
    cross_entropy((*plain)(x), y).backward();
    cross_entropy((*ddp)(x), y).backward();
    s1->step();
    s2->step();
  }
  expect_bitwise_equal(ddp->named_parameters(), plain->named_parameters(), "world of one");
  ddp.reset();
  destroy_process_group();
}

// DDPOptions::reducer reaches the Reducer as it is: both caps shape the buckets, rebuild_buckets
// and comm_dtype take effect. On a world-of-one group made directly (no init_process_group).
TEST(DDPWorldOfOne, ReducerOptionsReachTheReducer) {
  auto pg = std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
  auto train_two_steps = [](DistributedDataParallel& ddp) {
    auto sgd = test::ddp_case_optimizer(ddp);
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = test::ddp_case_batch(s, 8, kF32);
      sgd->zero_grad();
      cross_entropy(ddp(x), y).backward();
      sgd->step();
    }
  };
  using Names = std::vector<std::vector<std::string>>;
  // Defaults (1 MiB, then 25 MiB): the six float32 parameters (7,024 bytes) share one bucket.
  DistributedDataParallel plain(test::ddp_case_model(kF32, 3), pg);
  EXPECT_EQ(plain.reducer().bucket_names(),
            (Names{{"4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"}}));
  // Reverse registration order, bytes: 4.bias 16, 4.weight 512, 2.bias 128 (656 >= 600 closes
  // the first bucket), 2.weight 4096, 0.bias 128, 0.weight 1024 (5,248 >= 5,000 closes).
  DDPOptions o;
  o.reducer.first_bucket_cap_bytes = 600;
  o.reducer.bucket_cap_bytes = 5000;
  o.reducer.rebuild_buckets = false;
  o.reducer.comm_dtype = kBF16;
  DistributedDataParallel ddp(test::ddp_case_model(kF32, 3), pg, o);
  Names want{{"4.bias", "4.weight", "2.bias"}, {"2.weight", "0.bias", "0.weight"}};
  EXPECT_EQ(ddp.reducer().bucket_names(), want);
  ASSERT_EQ(ddp.reducer().bucket_tensors().size(), 2u);
  for (const Tensor& t : ddp.reducer().bucket_tensors()) EXPECT_EQ(t.dtype(), kBF16);
  train_two_steps(ddp);
  EXPECT_FALSE(ddp.reducer().buckets_rebuilt());
  train_two_steps(plain);
  EXPECT_TRUE(plain.reducer().buckets_rebuilt());
  for (const Tensor& t : plain.reducer().bucket_tensors()) EXPECT_EQ(t.dtype(), kF32);
}

}  // namespace
