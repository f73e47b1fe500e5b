// Exact resume: two epochs straight and (one epoch + a crash mid-epoch + resume) give
// bit-identical final weights on the CPU (docs/checkpoints-and-logging.md). Also: the short CPU run
// learns. Each run is the train_mlp program (examples/train_mlp.cpp), its loop and the parts in
// train/.
#include <gtest/gtest.h>

#include <filesystem>

#include "autograd/ops/ops.h"
#include "example_program.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "support/fashion_mnist.h"

using namespace loom;
using namespace loom::testing_support;
namespace fs = std::filesystem;

namespace {

// 2 epochs of 16 steps (1024 images, batch 64) of an MLP of width 64 on the CPU.
std::string small_run(const fs::path& dir, const std::string& data) {
  return "--data-dir " + data +
         " --device cpu --epochs 2 --batch-size 64 --train-limit 1024 --workers 2 --seed 7"
         " --hidden 64 --checkpoint-dir " +
         dir.string();
}

fs::path temp_dir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("loom_resume_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Two epochs straight against one epoch, a crash 5 steps into epoch 2, and a resume; `amp` is
// the --amp mode (fp16 also saves and restores the GradScaler's state).
void check_resume(const std::string& data, const std::string& amp) {
  fs::path a = temp_dir("straight" + amp), b = temp_dir("resumed" + amp);
  auto cfg = [&](const fs::path& dir) { return small_run(dir, data) + " --amp " + amp; };
  ProgramRun straight = run_train_mlp(cfg(a));
  ASSERT_EQ(straight.exit_code, 0) << straight.out << straight.err;
  EXPECT_EQ(steps_run(straight.out), 32) << straight.out;

  // Dies 5 steps into epoch 2, after the epoch-1 checkpoint.
  ProgramRun crashed = run_train_mlp(cfg(b) + " --max-steps 21");
  ASSERT_EQ(crashed.exit_code, 0) << crashed.out << crashed.err;
  ProgramRun resumed = run_train_mlp(cfg(b) + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
  EXPECT_EQ(steps_run(resumed.out), 32) << resumed.out;
  EXPECT_EQ(last_test_loss(resumed.out), last_test_loss(straight.out)) << resumed.out;
  EXPECT_NE(last_test_loss(straight.out), "") << straight.out;

  auto sa = load_checkpoint(*latest_checkpoint(a.string()));
  auto sb = load_checkpoint(*latest_checkpoint(b.string()));
  ASSERT_EQ(sa.model.size(), sb.model.size());
  for (size_t i = 0; i < sa.model.size(); ++i) {
    EXPECT_EQ(sa.model[i].first, sb.model[i].first);
    EXPECT_EQ(sa.model[i].second.to_vector<float>(), sb.model[i].second.to_vector<float>())
        << sa.model[i].first;
  }
  for (size_t i = 0; i < sa.optimizer.size(); ++i)
    EXPECT_EQ(sa.optimizer[i].second.to_vector<double>(),
              sb.optimizer[i].second.to_vector<double>())
        << sa.optimizer[i].first;
  EXPECT_EQ(sa.scaler.empty(), amp != "fp16") << "the scaler's state is saved with fp16 only";
  ASSERT_EQ(sa.scaler.size(), sb.scaler.size());
  for (size_t i = 0; i < sa.scaler.size(); ++i)
    EXPECT_EQ(sa.scaler[i].second.to_vector<double>(), sb.scaler[i].second.to_vector<double>())
        << sa.scaler[i].first;
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace

TEST(Resume, KilledAndResumedRunEqualsStraightRunBitForBit) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  check_resume(data, "off");
}

TEST(Resume, Fp16KilledAndResumedRunEqualsStraightRunBitForBit) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  check_resume(data, "fp16");
}

TEST(Resume, ShortCpuRunLearns) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  ProgramRun r = run_train_mlp("--data-dir " + data +
                               " --device cpu --epochs 1 --batch-size 128 --train-limit 8192"
                               " --workers 1 --hidden 64 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("final test accuracy ([0-9.]+)%"))) << r.out;
  EXPECT_GT(std::stod(m[1]), 72.0) << "1 epoch on 8192 Fashion-MNIST images should reach > 72%";
}
