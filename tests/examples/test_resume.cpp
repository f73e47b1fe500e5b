// Exact resume: two epochs straight and (one epoch + a crash mid-epoch + resume) give
// bit-identical final weights on the CPU (SPECS.md, Checkpoints). Also: the short CPU run learns.
#include <gtest/gtest.h>

#include <filesystem>

#include "autograd/ops/ops.h"
#include "examples/common/trainer.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "support/fashion_mnist.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

examples::TrainConfig small_run(const fs::path& dir, const std::string& data) {
  examples::TrainConfig c;
  c.data_dir = data;
  c.device = "cpu";
  c.epochs = 2;
  c.batch_size = 64;
  c.train_limit = 1024;  // 16 steps per epoch
  c.workers = 2;
  c.seed = 7;
  c.checkpoint_dir = dir.string();
  return c;
}

std::shared_ptr<nn::Module> fresh_model(uint64_t seed) {
  manual_seed(seed);
  return nn::make_mlp(64);
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
  auto cfg = [&](const fs::path& dir) {
    auto c = small_run(dir, data);
    c.amp = amp;
    return c;
  };
  auto straight = examples::train_classifier(fresh_model(7), cfg(a));
  EXPECT_EQ(straight.steps, 32);

  auto crashed_cfg = cfg(b);
  crashed_cfg.max_steps = 21;  // dies 5 steps into epoch 2, after the epoch-1 checkpoint
  examples::train_classifier(fresh_model(7), crashed_cfg);
  auto resumed_cfg = cfg(b);
  resumed_cfg.resume = true;
  auto resumed =
      examples::train_classifier(fresh_model(99), resumed_cfg);  // other init: must be overwritten
  EXPECT_EQ(resumed.steps, 32);
  EXPECT_EQ(resumed.test_loss, straight.test_loss);

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
  examples::TrainConfig c;
  c.data_dir = data;
  c.device = "cpu";
  c.epochs = 1;
  c.batch_size = 128;
  c.train_limit = 8192;
  c.workers = 1;
  auto r = examples::train_classifier(fresh_model(1), c);
  EXPECT_GT(r.test_accuracy, 0.72) << "1 epoch on 8192 Fashion-MNIST images should reach > 72%";
}
