// Runs that make no sense are refused by the shared training loop, before the first step when
// that can be known: zero-step runs, --resume with a missing folder, unwritable folders, a
// checkpoint that does not fit the run, a diverging loss; "final test accuracy" only after an
// evaluation. Leaves out: exact resume (test_resume.cpp) and flag parsing (test_flags.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "autograd/ops/ops.h"
#include "examples/common/trainer.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "support/fashion_mnist.h"

using namespace loom;
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

examples::TrainConfig tiny(const std::string& data) {
  examples::TrainConfig c;
  c.device = "cpu";
  c.epochs = 1;
  c.batch_size = 32;
  c.train_limit = 256;  // 8 steps per epoch
  c.workers = 0;
  c.data_dir = data;
  return c;
}

std::shared_ptr<nn::Module> model() {
  manual_seed(3);
  return nn::make_mlp(16);
}

// f must throw loom::Error mentioning every part; returns the message.
std::string expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    std::string what = e.what();
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "missing '" << p << "' in: " << what;
    return what;
  }
  ADD_FAILURE() << "no error; expected one mentioning '" << *parts.begin() << "'";
  return "";
}

}  // namespace

TEST(TrainerRefusals, ResumeFromAFolderThatDoesNotExistIsAnError) {
  TempDir dir("resume_missing");
  auto c = tiny("/nonexistent-data");  // the folder check comes before the data is read
  c.checkpoint_dir = (dir.path / "chekpoints-typo").string();
  c.resume = true;
  expect_error([&] { examples::train_classifier(model(), c); },
               {"--resume", "chekpoints-typo", "does not exist"});
  EXPECT_FALSE(fs::exists(c.checkpoint_dir));  // not created behind the user's back
}

TEST(TrainerRefusals, UnwritableCheckpointOrLogFolderIsAnErrorBeforeTraining) {
  TempDir dir("unwritable");
  std::ofstream(dir.path / "a-file")
      << "x";  // a folder cannot be created under a file (even as root)
  auto c = tiny("/nonexistent-data");
  c.checkpoint_dir = (dir.path / "a-file" / "ckpt").string();
  testing::internal::CaptureStdout();
  expect_error([&] { examples::train_classifier(model(), c); },
               {"--checkpoint-dir", "a-file/ckpt"});
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.find("training"), std::string::npos) << out;  // refused before anything ran
  c.checkpoint_dir.clear();
  c.log_dir = (dir.path / "a-file" / "runs").string();
  expect_error([&] { examples::train_classifier(model(), c); }, {"--log-dir", "a-file/runs"});
}

TEST(TrainerRefusals, BadDeviceIsAnErrorNamingIt) {
  auto c = tiny("/nonexistent-data");
  c.device = "cuda:99999999999";
  expect_error([&] { examples::train_classifier(model(), c); }, {"cuda:99999999999"});
  c.device = "cuda:63";
  expect_error([&] { examples::train_classifier(model(), c); }, {"--device cuda:63"});
}

TEST(TrainerRefusals, ZeroStepRunsAreErrors) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  auto c = tiny(data);
  c.batch_size = 512;  // 256 examples make no full batch
  expect_error([&] { examples::train_classifier(model(), c); },
               {"no training step", "256 training examples", "--batch-size 512", "--train-limit"});
}

TEST(TrainerRefusals, EmptyResumeFolderStartsFreshAndSaysSo) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  TempDir dir("resume_empty");
  auto c = tiny(data);
  c.checkpoint_dir = dir.path.string();
  c.resume = true;
  c.max_steps = 2;
  testing::internal::CaptureStdout();
  auto r = examples::train_classifier(model(), c);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("no checkpoint in " + c.checkpoint_dir + " yet: starting a new run"),
            std::string::npos)
      << out;
  EXPECT_EQ(r.steps, 2);
}

TEST(TrainerRefusals, FinalAccuracyOnlyAfterAnEvaluation) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  auto c = tiny(data);
  c.max_steps = 3;  // stops inside the first epoch: no evaluation
  testing::internal::CaptureStdout();
  auto r = examples::train_classifier(model(), c);
  examples::print_final(r);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(r.evaluated);
  EXPECT_EQ(out.find("final test accuracy"), std::string::npos) << out;
  EXPECT_NE(out.find("no evaluation ran"), std::string::npos) << out;

  c.max_steps = 0;  // a whole epoch: evaluated, and the summary keeps eval time apart
  testing::internal::CaptureStdout();
  r = examples::train_classifier(model(), c);
  examples::print_final(r);
  out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(r.evaluated);
  EXPECT_GT(r.test_accuracy, 0.1);
  EXPECT_NE(out.find("final test accuracy"), std::string::npos) << out;
  EXPECT_NE(out.find(" eval "), std::string::npos) << out;
}

TEST(TrainerRefusals, DivergenceStopsAtTheFirstNonFiniteLoss) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  auto c = tiny(data);
  c.optimizer = "sgd";
  c.lr = 1e3;  // explodes within a few steps
  c.log_every = 4;
  std::string what;
  testing::internal::CaptureStdout();
  what = expect_error(
      [&] { examples::train_classifier(model(), c); },
      {"training diverged: the loss at step ", "last finite loss ", "--allow-nonfinite"});
  testing::internal::GetCapturedStdout();
  // The step named is the first non-finite one: the message's "last finite loss ... at step S-1".
  size_t at = what.find("the loss at step ");
  ASSERT_NE(at, std::string::npos);
  long bad = std::stol(what.substr(at + 17));
  EXPECT_GE(bad, 2);
  EXPECT_NE(what.find("at step " + std::to_string(bad - 1) + ")"), std::string::npos) << what;

  c.allow_nonfinite = true;  // the flag lets it go on to the end of the epoch
  testing::internal::CaptureStdout();
  auto r = examples::train_classifier(model(), c);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(r.steps, 8);
}

TEST(TrainerRefusals, CheckpointsThatDoNotFitTheRunAreErrorsNamingTheFile) {
  LOOM_FASHION_MNIST_OR_SKIP(data);
  auto c = tiny(data);
  c.epochs = 2;
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
    auto cr = c;
    cr.checkpoint_dir = dir.path.string();
    cr.resume = true;
    std::vector<std::string> parts = k.parts;
    parts.push_back(file);
    try {
      examples::train_classifier(model(), cr);
      ADD_FAILURE() << k.name << ": resumed without an error";
    } catch (const Error& e) {
      for (const auto& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << k.name << ": " << e.what();
    }
  }
}
