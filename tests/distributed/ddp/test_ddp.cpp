// DistributedDataParallel in real multi-process jobs over Gloo (ddp_tool.cpp is the worker): the
// same weights on every rank after construction and after 20 steps (bitwise), equal to one
// process on the concatenated batches, no_sync (its gradients and its collectives: none),
// unused parameters, errors, join (the state of the rank that ran the most steps), BatchNorm
// buffers broadcast from rank 0; the bucket assignment; a world of one (a gradient cleared between
// steps, a communication dtype). NCCL: the same equivalence on two GPUs (skipped below two).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/cuda/available.h"
#include "ddp_case.h"
#include "distributed/buckets/bucket_layout.h"
#include "distributed/ddp/ddp.h"
#include "distributed/process_group/local_process_group.h"
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

// The BatchNorm run of `ddp_tool buffers 1` on two ranks, in one process: the gradient of the
// mean of both ranks' losses (each rank's batch normalised by its own statistics), and rank 0's
// running statistics alone (rank 1's forward starts from them and its update is overwritten by
// the next forward's broadcast). Returns the parameters then the buffers; *eval gets the output
// on the shared evaluation batch.
[[maybe_unused]] NamedTensors bn_reference(Tensor* eval) {
  auto model = test::ddp_bn_model(20);
  auto sgd = test::ddp_case_optimizer(*model);
  for (int s = 0; s < 4; ++s) {
    auto [x0, y0] = test::ddp_bn_batch(s, 0);
    auto [x1, y1] = test::ddp_bn_batch(s, 1);
    sgd->zero_grad();
    std::vector<Tensor> before;
    for (auto& [n, b] : model->named_buffers()) before.push_back(b.clone());
    Tensor l1 = cross_entropy((*model)(x1), y1);
    {
      NoGradGuard g;
      auto bufs = model->named_buffers();
      for (size_t i = 0; i < bufs.size(); ++i) bufs[i].second.copy_(before[i]);
    }
    Tensor l0 = cross_entropy((*model)(x0), y0);
    ((l0 + l1) * 0.5).backward();
    sgd->step();
  }
  model->train(false);
  {
    NoGradGuard g;
    *eval = (*model)(test::ddp_bn_batch(0, -1).first);
  }
  NamedTensors out = model->named_parameters();
  for (auto& nb : model->named_buffers()) out.push_back(nb);
  return out;
}

// `ddp_tool join` in one process: at step s every rank r with 3 + 2r > s contributes its batch,
// and the sum is divided by the whole world (3), as the joined ranks' zeros make it.
[[maybe_unused]] NamedTensors join_reference() {
  auto model = test::ddp_case_model(kF32, 9);
  auto sgd = test::ddp_case_optimizer(*model);
  for (int s = 0; s < 7; ++s) {
    sgd->zero_grad();
    Tensor loss;
    for (int r = 0; r < 3; ++r) {
      if (s >= 3 + 2 * r) continue;
      auto [x, y] = test::ddp_case_batch(s * 10 + r, 4, kF32);
      Tensor l = cross_entropy((*model)(x), y);
      loss = loss.defined() ? loss + l : l;
    }
    (loss * (1.0 / 3)).backward();
    sgd->step();
  }
  return model->named_parameters();
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

// Counted by a process group that passes each collective on to Gloo (ddp_tool collectives): the
// two backwards under no_sync make none at all, the next one exactly one all_reduce per bucket.
// 512-byte buckets over the ddp_case model in float32 (reverse registration order): 4.bias 16 B
// + 4.weight 512 B, 2.bias 128 B + 2.weight 4096 B, 0.bias 128 B + 0.weight 1024 B: 3 buckets.
TEST(DDPGlooNoSync, NoSyncMakesNoCollectiveAndTheNextBackwardOnePerBucket) {
  auto run = test::run_workers(LOOM_DDP_TOOL, {"collectives"}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(run);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(run.output[size_t(r)].find("no_sync: 0 all_reduces 0 other; synchronised: 3 "
                                         "all_reduces 0 other; buckets 3"),
              std::string::npos)
        << "rank " << r << ": " << run.summary();
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

// Rank r runs 3 + 2r steps: rank 2 runs the most (7), and every rank must end with its weights:
// bitwise those rank 2 held when its own loop ended (join_own), and within float32 rounding of
// the uneven schedule run in one process. Rank 0's weights (3 steps) must differ from them, or
// the check could not tell the ranks apart.
TEST(DDPGlooJoin, EveryRankEndsWithTheWeightsOfTheRankThatRanTheMostSteps) {
  std::string dir = temp_dir();
  auto run = test::run_workers(LOOM_DDP_TOOL, {"join", dir}, 3, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(run);
  NamedTensors most = load(dir, "join_own", 2), fewest = load(dir, "join_own", 0);
  for (int r = 0; r < 3; ++r)
    expect_bitwise_equal(load(dir, "join", r), most,
                         "rank " + std::to_string(r) + " vs rank 2 (most steps)");
  NamedTensors ref = join_reference();
  ASSERT_EQ(ref.size(), most.size());
  double worst = 0, apart = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, max_abs_diff(most[i].second, ref[i].second));
    apart = std::max(apart, max_abs_diff(most[i].second, fewest[i].second));
  }
  // 7 float32 SGD steps of weights below 1: the ranks' gradients are summed in another order than
  // the one process sums its losses', an ulp or so a step (measured: 3e-8).
  EXPECT_LE(worst, 1e-6) << "rank 2's weights vs the uneven schedule in one process";
  EXPECT_GT(apart, 1e-3) << "rank 0 stopped 4 steps earlier: its weights must differ";
  std::filesystem::remove_all(dir);
}

// Each rank trains on its own data (mean r, spread 1 + r), so its local BatchNorm statistics
// differ; with broadcast_buffers every forward starts from rank 0's, so after the evaluation
// forward every rank holds rank 0's statistics and gives the same output, bit for bit, and both
// match one process that keeps rank 0's statistics. Without broadcast_buffers (the control) the
// ranks' statistics differ: the data reaches the buffers.
TEST(DDPGlooBuffers, BatchNormStatisticsAndEvalOutputsAreRankZerosOnEveryRank) {
  std::string dir = temp_dir();
  auto run = test::run_workers(LOOM_DDP_TOOL, {"buffers", "1", dir}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(run);
  NamedTensors state0 = load(dir, "bn_state", 0), eval0 = load(dir, "bn_eval", 0);
  expect_bitwise_equal(load(dir, "bn_state", 1), state0, "parameters and buffers, rank 1");
  expect_bitwise_equal(load(dir, "bn_eval", 1), eval0, "evaluation output, rank 1");
  auto find = [](const NamedTensors& t, const std::string& name) {
    for (auto& [n, v] : t)
      if (n == name) return v;
    ADD_FAILURE() << "no " << name;
    return zeros({0});
  };
  Tensor ref_eval;
  NamedTensors ref = bn_reference(&ref_eval);
  ASSERT_EQ(ref.size(), state0.size());
  // Float32, 4 steps. The mean of two gradients scales each by 0.5 (exact) and adds them in
  // either order, so they agree bit for bit here (measured); 1e-6 (a few ulps of values near 1)
  // leaves room for the engine summing the two forwards' contributions in another order.
  for (auto& [name, want] : ref) {
    EXPECT_LE(max_abs_diff(find(state0, name), want), 1e-6) << name;
  }
  EXPECT_LE(max_abs_diff(eval0[0].second, ref_eval), 1e-6) << "evaluation output";
  // The statistics moved off their start (mean 0, variance 1), and num_batches_tracked counts 4.
  EXPECT_GT(max_abs_diff(find(state0, "1.running_mean"), zeros({3})), 0.05);
  EXPECT_EQ(find(state0, "1.num_batches_tracked").item(), 4.0);
  std::filesystem::remove_all(dir);

  std::string control = temp_dir();
  auto off = test::run_workers(LOOM_DDP_TOOL, {"buffers", "0", control}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 120);
  expect_all_ok(off);
  EXPECT_GT(max_abs_diff(find(load(control, "bn_state", 0), "1.running_mean"),
                         find(load(control, "bn_state", 1), "1.running_mean")),
            0.05)
      << "without broadcast_buffers each rank keeps its own statistics";
  std::filesystem::remove_all(control);
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

// Note [Gradients as bucket views]: a parameter whose .grad was cleared between two steps (the
// others keep theirs and accumulate) gets its bucket view zero-filled at the next forward, so its
// gradient is the new step's alone, as in the plain model; the view still holds the earlier
// steps' gradient, which must not be added in. One bucket holds all six parameters. The clearing
// comes before the third step: the second forward rebuilds the buckets (fresh memory), so only
// from then on do the views hold a stale gradient.
TEST(DDPWorldOfOne, AGradientClearedBetweenStepsStartsFromZero) {
  auto pg = std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
  auto plain = test::ddp_case_model(kF64, 3);
  DistributedDataParallel ddp(test::ddp_case_model(kF64, 3), pg);
  ASSERT_EQ(ddp.reducer().bucket_names().size(), 1u);
  ASSERT_EQ(ddp.named_parameters()[2].first, "2.weight");
  auto grads = [](const NamedTensors& params) {
    NamedTensors g;
    for (auto& [n, p] : params) g.emplace_back(n, p.grad());
    return g;
  };
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = test::ddp_case_batch(s, 8, kF64);
    if (s == 2) {  // clear 2.weight's gradient alone, in both models
      plain->named_parameters()[2].second.set_grad(Tensor());
      ddp.named_parameters()[2].second.set_grad(Tensor());
    }
    cross_entropy((*plain)(x), y).backward();
    cross_entropy(ddp(x), y).backward();
  }
  EXPECT_TRUE(ddp.reducer().buckets_rebuilt());
  expect_bitwise_equal(grads(ddp.named_parameters()), grads(plain->named_parameters()),
                       "gradients after clearing 2.weight's");
  // In the plain model 2.weight's gradient is the third step's alone and the others hold the sum
  // of all three: the test reaches both kinds of view.
  auto once = test::ddp_case_model(kF64, 3);
  auto [x2, y2] = test::ddp_case_batch(2, 8, kF64);
  cross_entropy((*once)(x2), y2).backward();
  EXPECT_EQ(max_abs_diff(plain->named_parameters()[2].second.grad(),
                         once->named_parameters()[2].second.grad()),
            0.0);
  EXPECT_GT(max_abs_diff(plain->named_parameters()[0].second.grad(),
                         once->named_parameters()[0].second.grad()),
            1e-3);
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

// A world of one makes no all-reduce (its gradients are already the mean), so a communication
// dtype changes nothing: the gradients are the plain model's, bit for bit, not the low-precision
// buffer that no collective filled.
TEST(DDPWorldOfOne, ACommunicationDtypeLeavesTheGradientsAsTheyAre) {
  auto pg = std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
  auto plain = test::ddp_case_model(kF32, 3);
  DDPOptions o;
  o.reducer.comm_dtype = kBF16;
  DistributedDataParallel ddp(test::ddp_case_model(kF32, 3), pg, o);
  auto [x, y] = test::ddp_case_batch(0, 8, kF32);
  cross_entropy((*plain)(x), y).backward();
  cross_entropy(ddp(x), y).backward();
  NamedTensors got, want;
  for (auto& [n, p] : ddp.named_parameters()) got.emplace_back(n, p.grad());
  for (auto& [n, p] : plain->named_parameters()) want.emplace_back(n, p.grad());
  expect_bitwise_equal(got, want, "gradients with comm_dtype bf16 on one rank");
}

}  // namespace
