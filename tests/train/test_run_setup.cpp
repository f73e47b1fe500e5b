// The run's setup and evaluation (train/run_setup.h, train/evaluate.h) in a world of one: the
// device picker's answers and errors, the folder checks, the flags that do not fit together, and
// the sharded evaluation of a hand-made classifier against a hand count. Leaves out: the process
// group of N processes (tests/examples/test_train_mlp_ddp.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/cuda/available.h"
#include "core/error.h"
#include "data/dataset.h"
#include "nn/layers.h"
#include "support/errors.h"
#include "train/evaluate.h"
#include "train/run_setup.h"

using namespace loom;
using namespace loom::train;
namespace fs = std::filesystem;

using loom::test::error_of;

namespace {}  // namespace

TEST(RunSetup, DevicePickerNamesTheDeviceItCannotUse) {
  distributed::JobEnv env;
  EXPECT_EQ(pick_device("cpu", env), kCPU);
  if (cuda::device_count() == 0) {
    EXPECT_EQ(pick_device("", env), kCPU);
  }
  if (cuda::device_count() < 64) {
    std::string what = error_of([&] { pick_device("cuda:63", env); });
    EXPECT_NE(what.find("--device cuda:63: "), std::string::npos) << what;
  }
  EXPECT_NE(error_of([&] { pick_device("cuda:99999999999", env); }).find("cuda:99999999999"),
            std::string::npos);
}

TEST(RunSetup, AFolderThatCannotBeMadeIsAnErrorNamingTheFlag) {
  fs::path dir = fs::temp_directory_path() / ("loom_run_setup_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a-file") << "x";
  std::string what =
      error_of([&] { check_writable_dir("--log-dir", (dir / "a-file/x").string()); });
  EXPECT_NE(what.find("--log-dir " + (dir / "a-file/x").string() + ": cannot create the folder"),
            std::string::npos)
      << what;
  EXPECT_NO_THROW(check_writable_dir("--log-dir", (dir / "runs").string()));
  EXPECT_TRUE(fs::is_directory(dir / "runs"));
  fs::remove_all(dir);
}

TEST(RunSetup, FlagsThatDoNotFitAreErrorsBeforeAnythingRuns) {
  TrainConfig c;
  c.device = "cpu";
  c.resume = true;
  EXPECT_NE(error_of([&] { RunSetup run(c); }).find("--resume needs --checkpoint-dir"),
            std::string::npos);
  c.resume = false;
  c.cuda_graph = true;
  std::string e;
  EXPECT_NE(
      error_of([&] { RunSetup run(c); }).find("--cuda-graph needs a CUDA device, got --device cpu"),
      std::string::npos);
  c.zero = 3;  // FSDP's gathers and frees cannot be replayed: the reason comes first
  e = error_of([&] { RunSetup run(c); });
  EXPECT_NE(e.find("--cuda-graph with --zero 3: FullyShardedDataParallel"), std::string::npos) << e;
  c.zero = 0;
  c.pp = 2;  // so is a pipeline's (and before the world's size)
  e = error_of([&] { RunSetup run(c); });
  EXPECT_NE(e.find("--pp 2: a pipeline runs without --cuda-graph for now"), std::string::npos) << e;
  c.pp = 1;
  c.cuda_graph = false;
  c.grad_accum = 3;  // 128 rows cannot make 3 equal micro-batches
  e = error_of([&] { RunSetup run(c); });
  EXPECT_NE(e.find("--grad-accum 3 must divide each process's batch of 128"), std::string::npos)
      << e;
  c.grad_accum = 4;
  RunSetup run(c);  // the failed ones left no process group behind
  EXPECT_EQ(run.world, 1);
  EXPECT_EQ(run.local_batch, 128);
  EXPECT_EQ(run.device, kCPU);
}

// Logits = x (an identity Linear): rows (1,0) (0,1) (2,0) (0,3) with labels 0 1 1 1 are right 3
// times in 4; the loss is the mean of -log softmax(x)[label].
TEST(Evaluate, ClassifierEvaluationMatchesAHandCount) {
  TrainConfig c;
  c.device = "cpu";
  RunSetup run(c);
  auto lin = std::make_shared<nn::Linear>(2, 2);
  lin->weight.detach().copy_(from_vector<float>({1, 0, 0, 1}, {2, 2}));
  lin->bias.detach().zero_();
  auto ds =
      std::make_shared<data::TensorDataset>(from_vector<float>({1, 0, 0, 1, 2, 0, 0, 3}, {4, 2}),
                                            from_vector<int64_t>({0, 1, 1, 1}, {4}));
  data::DataLoader loader(ds, {.batch_size = 3});  // batches of 3 and 1
  Evaluation e = evaluate_classifier(*lin, loader, *run.pg, run.device);
  auto nll = [](double right, double other) {
    return std::log(std::exp(right) + std::exp(other)) - right;
  };
  double want = (nll(1, 0) + nll(1, 0) + nll(0, 2) + nll(3, 0)) / 4;
  EXPECT_DOUBLE_EQ(e.accuracy, 0.75);
  EXPECT_NEAR(e.loss, want, 1e-6);
  EXPECT_GE(e.seconds, 0.0);
}
