// Runs that make no sense are refused by the train_mlp program (its loop and the parts in train/),
// before the first step when that can be known: zero-step runs, --resume with a missing folder,
// unwritable folders, a checkpoint that does not fit the run, a diverging loss; "final test
// accuracy" only after an evaluation. Leaves out: exact resume (test_train_mlp_resume.cpp) and flag
// parsing (tests/train/test_flags.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "autograd/ops/ops.h"
#include "example_program.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "support/fashion_mnist.h"

using namespace loom;
using namespace loom::testing_support;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("loom_refusals_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// 1 epoch of 8 steps (256 images, batch 32) of an MLP of width 16 on the CPU; a flag in `more`
// replaces its default here (the program refuses a flag given twice).
std::string tiny(const std::string& data, const std::string& more = "") {
  std::string args;
  for (const char* d : {"--device cpu", "--epochs 1", "--batch-size 32", "--train-limit 256",
                        "--workers 0", "--hidden 16", "--seed 3"}) {
    std::string flag = std::string(d).substr(0, std::string(d).find(' ') + 1);
    if ((" " + more).find(" " + flag) == std::string::npos) args += std::string(d) + " ";
  }
  return args + "--data-dir " + data + " " + more;
}

// The program's model (train_mlp --hidden 16 --seed 3), for checkpoints written by hand.
std::shared_ptr<nn::Module> model() {
  manual_seed(3);
  return nn::make_mlp(16);
}

// The run must fail (exit code 1) with "train_mlp: error: " and every part on stderr; returns
// the message.
std::string expect_error(const std::string& args, std::initializer_list<std::string> parts) {
  ProgramRun r = run_train_mlp(args);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("train_mlp: error: "), std::string::npos) << r.err;
  for (const auto& p : parts)
    EXPECT_NE(r.err.find(p), std::string::npos) << "missing '" << p << "' in: " << r.err;
  return r.err;
}

}  // namespace

TEST(TrainerRefusals, ResumeFromAFolderThatDoesNotExistIsAnError) {
  TempDir dir("resume_missing");
  // The folder check comes before the data is read.
  std::string ckpt = (dir.path / "chekpoints-typo").string();
  expect_error(tiny("/nonexistent-data") + " --resume --checkpoint-dir " + ckpt,
               {"--resume", "chekpoints-typo", "does not exist"});
  EXPECT_FALSE(fs::exists(ckpt));  // not created behind the user's back
}

TEST(TrainerRefusals, UnwritableCheckpointOrLogFolderIsAnErrorBeforeTraining) {
  TempDir dir("unwritable");
  std::ofstream(dir.path / "a-file")
      << "x";  // a folder cannot be created under a file (even as root)
  ProgramRun r = run_train_mlp(tiny("/nonexistent-data") + " --checkpoint-dir " +
                               (dir.path / "a-file" / "ckpt").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--checkpoint-dir"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a-file/ckpt"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("training"), std::string::npos) << r.out;  // refused before anything ran
  expect_error(tiny("/nonexistent-data") + " --log-dir " + (dir.path / "a-file" / "runs").string(),
               {"--log-dir", "a-file/runs"});
}

TEST(TrainerRefusals, BadDeviceIsAnErrorNamingIt) {
  expect_error(tiny("/nonexistent-data", "--device cuda:99999999999"), {"cuda:99999999999"});
  expect_error(tiny("/nonexistent-data", "--device cuda:63"), {"--device cuda:63"});
}

TEST(TrainerRefusals, ZeroStepRunsAreErrors) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  expect_error(tiny(data, "--batch-size 512"),  // 256 examples make no full batch
               {"no training step", "256 training examples", "--batch-size 512", "--train-limit"});
}

TEST(TrainerRefusals, EmptyResumeFolderStartsFreshAndSaysSo) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  TempDir dir("resume_empty");
  ProgramRun r =
      run_train_mlp(tiny(data) + " --resume --max-steps 2 --checkpoint-dir " + dir.path.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no checkpoint in " + dir.path.string() + " yet: starting a new run"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(steps_run(r.out), 2) << r.out;
}

TEST(TrainerRefusals, FinalAccuracyOnlyAfterAnEvaluation) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  ProgramRun r = run_train_mlp(tiny(data) + " --max-steps 3");  // no evaluation
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("test acc"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("final test accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no evaluation ran"), std::string::npos) << r.out;
  EXPECT_EQ(steps_run(r.out), 3) << r.out;

  r = run_train_mlp(tiny(data));  // a whole epoch: evaluated, and the summary keeps eval time apart
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("final test accuracy ([0-9.]+)%"))) << r.out;
  EXPECT_GT(std::stod(m[1]), 10.0);
  EXPECT_NE(r.out.find(" eval "), std::string::npos) << r.out;
}

TEST(TrainerRefusals, DivergenceStopsAtTheFirstNonFiniteLoss) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  // Explodes within a few steps.
  const std::string args = tiny(data, "--seed 0 --optimizer sgd --lr 1000 --log-every 4");
  std::string what = expect_error(
      args, {"training diverged: the loss at step ", "last finite loss ", "--allow-nonfinite"});
  // The step named is the first non-finite one: the message's "last finite loss ... at step S-1".
  size_t at = what.find("the loss at step ");
  ASSERT_NE(at, std::string::npos);
  long bad = std::stol(what.substr(at + 17));
  EXPECT_GE(bad, 2);
  EXPECT_NE(what.find("at step " + std::to_string(bad - 1) + ")"), std::string::npos) << what;

  // The flag lets it go on to the end of the epoch.
  ProgramRun r = run_train_mlp(args + " --allow-nonfinite");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(steps_run(r.out), 8) << r.out;
}

TEST(TrainerRefusals, CheckpointsThatDoNotFitTheRunAreErrorsNamingTheFile) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  auto m = model();
  auto good_state = [&] {
    TrainingState st;
    st.model = m->state_dict();
    st.set_extra("epoch", 1);
    st.set_extra("position", 0);
    st.set_extra("step", 8);
    return st;
  };
  const std::string first = m->state_dict()[0].first;
  struct Case {
    std::string name;
    std::function<void(TrainingState&)> change;
    std::vector<std::string> parts;
  };
  std::vector<Case> cases = {
      {"epoch_beyond",
       [](TrainingState& s) { s.set_extra("epoch", 5); },
       {"epoch 5 is beyond", "--epochs 2"}},
      {"complete", [](TrainingState& s) { s.set_extra("epoch", 2); }, {"the run is complete"}},
      {"position_beyond",
       [](TrainingState& s) { s.set_extra("position", 9999); },
       {"sampler position 9999", "256 examples"}},
      {"step_beyond", [](TrainingState& s) { s.set_extra("step", 999); }, {"step 999 is beyond"}},
      {"dtype",
       [](TrainingState& s) { s.model[0].second = s.model[0].second.to(kF64); },
       {"model tensor '" + first + "' is float64", "the model's is float32"}},
  };
  for (const Case& k : cases) {
    TempDir dir("fit_" + k.name);
    TrainingState st = good_state();
    k.change(st);
    std::string file = save_checkpoint(dir.path.string(), 8, st);
    ProgramRun r =
        run_train_mlp(tiny(data, "--epochs 2 --resume --checkpoint-dir " + dir.path.string()));
    EXPECT_EQ(r.exit_code, 1) << k.name << ": resumed without an error: " << r.out;
    std::vector<std::string> parts = k.parts;
    parts.push_back(file);
    for (const auto& p : parts)
      EXPECT_NE(r.err.find(p), std::string::npos) << k.name << ": " << r.err;
  }
}
