// Gradient accumulation under DistributedDataParallel through train::StepRunner, 2 Gloo
// processes (step_runner_ddp_tool.cpp is the worker): k = 2 micro-batches per rank end with the
// weights of k = 1 and of one process on the whole global batch, and only the last micro-batch
// all-reduces (the first runs under no_sync): as many all-reduces as with k = 1.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "autograd/ops/ops.h"
#include "distributed/ddp/ddp_case.h"
#include "distributed/spawn.h"
#include "nn/serialize.h"

using namespace loom;

#ifdef LOOM_WITH_GLOO
namespace {

constexpr int kSteps = 4;

struct Job {
  nn::NamedTensors final0, final1;
  long all_reduces = -1;  // rank 0's, during the steps
};

Job run_job(int64_t k) {
  char t[] = "/tmp/loom-accum-XXXXXX";
  std::string dir = mkdtemp(t);
  auto run =
      test::run_workers(LOOM_STEP_RUNNER_DDP_TOOL, {std::to_string(k), std::to_string(kSteps), dir},
                        2, test::free_port(), {}, 120);
  Job j;
  EXPECT_FALSE(run.timed_out) << run.summary();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(run.exit_codes[size_t(r)], 0) << run.summary();
  if (::testing::Test::HasFailure()) return j;
  j.final0 = load_safetensors(dir + "/final_rank0.safetensors").tensors;
  j.final1 = load_safetensors(dir + "/final_rank1.safetensors").tensors;
  std::smatch m;
  if (std::regex_search(run.output[0], m, std::regex("all_reduces ([0-9]+)")))
    j.all_reduces = std::stol(m[1]);
  std::filesystem::remove_all(dir);
  return j;
}

// One process, the whole global batch of 16 rows, written out by hand.
nn::NamedTensors reference() {
  auto model = test::ddp_case_model(kF64, 100);
  auto sgd = test::ddp_case_optimizer(*model);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, 16, kF64);
    sgd->zero_grad();
    cross_entropy((*model)(x), y).backward();
    sgd->step();
  }
  return model->named_parameters();
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(a - b)).item(); }

}  // namespace

// float64: the ranks' and micro-batches' partial sums are added in other orders than one
// process's, a few ulps per step: 1e-12 on weights of size ~1.
TEST(GradAccumDDP, TwoMicroBatchesPerRankEqualOneAndSkipTheFirstAllReduce) {
  Job one = run_job(1), two = run_job(2);
  ASSERT_FALSE(::testing::Test::HasFailure());
  nn::NamedTensors ref = reference(), init = test::ddp_case_model(kF64, 100)->named_parameters();
  ASSERT_EQ(two.final0.size(), ref.size());
  double moved = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string& n = ref[i].first;
    EXPECT_EQ(max_abs_diff(two.final0[i].second, two.final1[i].second), 0.0) << n;
    EXPECT_LE(max_abs_diff(two.final0[i].second, one.final0[i].second), 1e-12) << n;
    EXPECT_LE(max_abs_diff(two.final0[i].second, ref[i].second), 1e-12) << n;
    moved = std::max(moved, max_abs_diff(ref[i].second, init[i].second));
  }
  EXPECT_GT(moved, 1e-3) << "the weights must move for the comparison to mean anything";
  // One bucket (the model is 1.4k parameters): one all-reduce per step, none for the first
  // micro-batch.
  EXPECT_EQ(one.all_reduces, kSteps);
  EXPECT_EQ(two.all_reduces, kSteps) << "the first micro-batch must run under no_sync";
}
#endif
