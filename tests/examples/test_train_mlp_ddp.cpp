// The example programs data-parallel under the real launcher (loomrun), on CPU processes (Gloo):
// train_mlp on 2 processes reaches the one-process accuracy for the same global batch; a run saved
// by 2 processes resumes on 3 and ends where one process running straight ends (N-to-M resume);
// --profile prints every rank's breakdown; --cuda-graph is refused with Gloo's reason. Every run is
// bounded by `timeout`.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int status = -1;
  std::string output;
};

// Runs a shell command line with a hard time limit; stdout and stderr together.
[[maybe_unused]] Outcome run_cmd(const std::string& cmd, int seconds = 240) {
  std::string line = "timeout -k 5 " + std::to_string(seconds) + " " + cmd + " 2>&1";
  Outcome r;
  FILE* p = popen(line.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

[[maybe_unused]] std::string mlp(int procs, const std::string& args) {
  std::string prog =
      std::string(TRAIN_MLP_BIN) + " --device cpu --workers 0 --hidden 64 --seed 3 " + args;
  if (procs == 1) return prog;
  return std::string(LOOMRUN_BIN) + " --standalone --nproc_per_node=" + std::to_string(procs) +
         " " + prog;
}

[[maybe_unused]] double final_accuracy(const std::string& out) {
  std::smatch m;
  std::regex re("final test accuracy ([0-9.]+)%");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stod(m[1]);
}

[[maybe_unused]] fs::path temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("loom_ddp_ex_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

#ifdef LOOM_WITH_GLOO
TEST(DDPExamples, TrainMlpOnTwoProcessesReachesTheOneProcessAccuracy) {
  std::string args = "--epochs 1 --batch-size 128 --train-limit 4096";
  Outcome one = run_cmd(mlp(1, args));
  ASSERT_EQ(one.status, 0) << one.output;
  Outcome two = run_cmd(mlp(2, args + " --profile"));
  ASSERT_EQ(two.status, 0) << two.output;
  double a1 = final_accuracy(one.output), a2 = final_accuracy(two.output);
  ASSERT_GT(a1, 60) << one.output;
  EXPECT_NEAR(a2, a1, 1.0) << two.output;  // the same global batches: nearly the same weights
  EXPECT_NE(two.output.find("x 2 processes (gloo)"), std::string::npos) << two.output;
  // Rank 0 alone prints the result; every rank prints its profile.
  EXPECT_EQ(two.output.find("[rank 1] final test accuracy"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("[rank 0] profile rank 0:"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("[rank 1] profile rank 1:"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("all-reduce exposed"), std::string::npos) << two.output;
}

// --cuda-graph over Gloo: refused before anything trains, on every rank, with the reason (Gloo's
// all-reduces run on host threads) and the way out (NCCL on GPUs), not with the device check.
TEST(DDPExamples, CudaGraphOverGlooIsRefusedWithTheReason) {
  Outcome two = run_cmd(mlp(2, "--epochs 1 --batch-size 128 --train-limit 512 --cuda-graph"), 120);
  EXPECT_NE(two.status, 0) << two.output;
  for (const char* part : {"--cuda-graph with 2 processes over gloo: gloo runs each all-reduce on "
                           "host threads over CPU tensors",
                           "NCCL's all-reduces are captured: run on CUDA devices"})
    EXPECT_NE(two.output.find(part), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("needs a CUDA device"), std::string::npos) << two.output;
  EXPECT_EQ(two.output.find("final test accuracy"), std::string::npos) << two.output;
}

TEST(DDPExamples, SavedByTwoProcessesResumedByThreeContinuesTheSameRun) {
  // Global batch 96 (divisible by 1, 2 and 3), 16 steps per epoch; checkpoints every 6 steps.
  fs::path straight = temp_dir("straight"), split = temp_dir("split");
  std::string common =
      "--epochs 1 --batch-size 96 --train-limit 1536 --optimizer sgd --lr 0.05 --checkpoint-every "
      "6 ";
  Outcome a = run_cmd(mlp(1, common + "--max-steps 12 --checkpoint-dir " + straight.string()));
  ASSERT_EQ(a.status, 0) << a.output;
  Outcome b = run_cmd(mlp(2, common + "--max-steps 6 --checkpoint-dir " + split.string()));
  ASSERT_EQ(b.status, 0) << b.output;
  Outcome c =
      run_cmd(mlp(3, common + "--max-steps 12 --resume --checkpoint-dir " + split.string()));
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_NE(c.output.find("written by 2 process(es), now 3"), std::string::npos) << c.output;

  auto sa = load_checkpoint(straight / "ckpt-00000012.safetensors");
  auto sc = load_checkpoint(split / "ckpt-00000012.safetensors");
  auto s6 = load_checkpoint(straight / "ckpt-00000006.safetensors");
  EXPECT_EQ(sc.extra_int("step"), 12);
  EXPECT_EQ(sc.extra_int("position"), 12 * 96);
  EXPECT_EQ(sc.extra_int("world_size"), 3);
  ASSERT_EQ(sa.model.size(), sc.model.size());
  double worst = 0, moved = 0;
  for (size_t i = 0; i < sa.model.size(); ++i) {
    ASSERT_EQ(sa.model[i].first, sc.model[i].first);
    worst = std::max(worst, max(abs(sa.model[i].second - sc.model[i].second)).item());
    moved = std::max(moved, max(abs(sa.model[i].second - s6.model[i].second)).item());
  }
  EXPECT_LE(worst, 1e-5) << "2 then 3 processes vs one process straight";
  EXPECT_GT(moved, 1e-3)
      << "steps 7-12 must change the weights for the comparison to mean anything";
  fs::remove_all(straight);
  fs::remove_all(split);
}
#endif
