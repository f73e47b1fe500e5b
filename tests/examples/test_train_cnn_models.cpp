// train_cnn (examples/train_cnn.cpp) with the image models people use, as a program on the CPU:
// --model vit on 2 Gloo processes under loomrun ends with one process's weights for the same
// global batch, and --model resnet18 with --sync-bn has one process's gradients (without it,
// BatchNorm normalises each rank's half batch by its own statistics); the cosine
// schedule is saved in checkpoints and a resumed run ends where the straight run ends, bit for
// bit; --recompute-activations under --zero 3 ends with the plain run's weights. Tiny runs
// (--train-limit, --max-steps) so that no evaluation runs; each bounded by
// `timeout`. Leaves out: accuracy (README: the Fashion-MNIST runs on one H200) and CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/ops/ops.h"
#include "example_program.h"
#include "nn/checkpoint.h"
#include "support/fashion_mnist.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

using testing_support::fresh_temp_dir;
using testing_support::run_command;

// The data folder comes from testing_support::fashion_mnist_dir (the tests skip without one).
std::string train_cnn(int procs, const std::string& args, const fs::path& dir) {
  std::string prog = std::string(TRAIN_CNN_BIN) + " --data-dir " +
                     testing_support::fashion_mnist_dir() +
                     " --device cpu --workers 0 --seed 5 --epochs 1 --train-limit 256 " + args +
                     " --checkpoint-dir " + dir.string();
  if (procs == 1) return prog;
  return std::string(LOOMRUN_BIN) + " --standalone --nproc_per_node=" + std::to_string(procs) +
         " " + prog;
}

// The largest |a - b| over the model tensors of two checkpoints, and over a and `start`.
struct Distance {
  double apart = 0, moved = 0;
};

Distance distance(const fs::path& a, const fs::path& b, const fs::path& start) {
  auto sa = load_checkpoint(a.string()), sb = load_checkpoint(b.string());
  auto s0 = load_checkpoint(start.string());
  Distance d;
  EXPECT_EQ(sa.model.size(), sb.model.size());
  for (size_t i = 0; i < sa.model.size() && i < sb.model.size(); ++i) {
    EXPECT_EQ(sa.model[i].first, sb.model[i].first);
    if (sa.model[i].first.find("running_") != std::string::npos) continue;  // BatchNorm buffers
    if (sa.model[i].first.find("num_batches") != std::string::npos) continue;
    d.apart = std::max(d.apart, max(abs(sa.model[i].second - sb.model[i].second)).item());
    d.moved = std::max(d.moved, max(abs(sa.model[i].second - s0.model[i].second)).item());
  }
  return d;
}

std::string ckpt(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%08ld.safetensors", long(step));
  return name;
}

}  // namespace

#ifdef LOOM_WITH_GLOO
TEST(TrainCnnModels, VitOnTwoProcessesEndsWithOneProcesssWeights) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path one = fresh_temp_dir("cnn_vit1"), two = fresh_temp_dir("cnn_vit2");
  const std::string args =
      "--model vit --batch-size 16 --optimizer adamw --lr 2e-3 --weight-decay 0.05 "
      "--lr-schedule cosine --warmup 1 --max-steps 4 --checkpoint-every 1 --keep-last 10";
  auto a = run_command(train_cnn(1, args, one));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_command(train_cnn(2, args, two));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(a.output.find("training VisionTransformer"), std::string::npos) << a.output;
  Distance d = distance(one / ckpt(4), two / ckpt(4), one / ckpt(1));
  // Rounding only (1e-6 to 2e-5 here, depending on the compiler's summation order; Adam's
  // normalised steps amplify it), against steps of about 2e-3.
  EXPECT_LE(d.apart, 1e-4) << "2 processes vs 1, the same global batches";
  EXPECT_GT(d.moved, 1e-3) << "steps 2-4 must move the weights for the comparison to mean much";
  fs::remove_all(one);
  fs::remove_all(two);
}

// --zero 3 (FullyShardedDataParallel: each BasicBlock, and the stem's convolution, a unit; the
// BatchNorm buffers each rank's own, rank 0's saved) on 2 processes ends with DDP's weights and
// DDP's rank-0 running statistics.
TEST(TrainCnnModels, ResNet18UnderZeroThreeEndsWithDdpsWeights) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path ddp = fresh_temp_dir("cnn_ddp"), z3 = fresh_temp_dir("cnn_z3");
  const std::string args =
      "--model resnet18 --batch-size 16 --optimizer adamw --lr 2e-3 --max-steps 2 "
      "--checkpoint-every 1 --keep-last 10";
  auto a = run_command(train_cnn(2, args, ddp));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_command(train_cnn(2, args + " --zero 3", z3));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  Distance d = distance(ddp / ckpt(2), z3 / ckpt(2), ddp / ckpt(1));
  EXPECT_LE(d.apart, 1e-4) << "ZeRO-3 vs DDP on the same 2 processes";
  EXPECT_GT(d.moved, 1e-3) << "step 2 must move the weights for the comparison to mean much";
  auto sa = load_checkpoint((ddp / ckpt(2)).string()),
       sb = load_checkpoint((z3 / ckpt(2)).string());
  for (size_t i = 0; i < sa.model.size() && i < sb.model.size(); ++i)
    if (sa.model[i].first.find("running_") != std::string::npos) {
      EXPECT_LE(max(abs(sa.model[i].second - sb.model[i].second)).item(), 1e-5)
          << sa.model[i].first;
    }
  fs::remove_all(ddp);
  fs::remove_all(z3);
}

// --recompute-activations (Note [Recomputed activations]: each batch norm + ReLU output rebuilt in
// backward for the convolution after it), here also under --zero 3 (the BatchNorm parameters the
// recipe reads are gathered again for their unit's backward), ends with the plain run's weights.
TEST(TrainCnnModels, ResNet18WithRecomputedActivationsUnderZeroThreeEndsWithThePlainWeights) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path plain = fresh_temp_dir("cnn_plain"), re = fresh_temp_dir("cnn_recompute");
  const std::string args =
      "--model resnet18 --batch-size 16 --optimizer adamw --lr 2e-3 --max-steps 2 "
      "--checkpoint-every 1 --keep-last 10";
  auto a = run_command(train_cnn(1, args, plain));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_command(train_cnn(1, args + " --zero 3 --recompute-activations", re));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  Distance d = distance(plain / ckpt(2), re / ckpt(2), plain / ckpt(1));
  EXPECT_LE(d.apart, 1e-5) << "recomputed activations under ZeRO-3 vs the plain run";
  EXPECT_GT(d.moved, 1e-3) << "step 2 must move the weights for the comparison to mean much";
  fs::remove_all(plain);
  fs::remove_all(re);
}

namespace {

// The first step's gradients (SGD's momentum buffers after one step) of two checkpoints: the
// largest relative distance ||a - b|| / ||a|| of a tensor, over every tensor.
double gradients_apart(const fs::path& a, const fs::path& b) {
  auto sa = load_checkpoint(a.string()), sb = load_checkpoint(b.string());
  double worst = 0;
  EXPECT_EQ(sa.optimizer.size(), sb.optimizer.size());
  for (size_t i = 0; i < sa.optimizer.size() && i < sb.optimizer.size(); ++i) {
    const Tensor &x = sa.optimizer[i].second, &y = sb.optimizer[i].second;
    if (sa.optimizer[i].first.find("momentum") == std::string::npos) continue;
    const double norm = std::sqrt(sum(x * x).item());
    worst = std::max(worst, std::sqrt(sum((x - y) * (x - y)).item()) / std::max(1e-12, norm));
  }
  return worst;
}

}  // namespace

TEST(TrainCnnModels, ResNet18WithSyncBatchNormOnTwoProcessesHasOneProcesssGradients) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path one = fresh_temp_dir("cnn_rn1"), two = fresh_temp_dir("cnn_rn2"),
           plain = fresh_temp_dir("cnn_rn2p");
  // One step: ResNet-18 at initialisation amplifies rounding over steps (the weights of 1 and 2
  // processes part by about 1e-3 after three), so the gradients of the first step are compared.
  const std::string args =
      "--model resnet18 --batch-size 16 --optimizer sgd --lr 0.02 --max-steps 1 "
      "--checkpoint-every 1";
  auto a = run_command(train_cnn(1, args + " --sync-bn true", one));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("training ResNet"), std::string::npos) << a.output;
  EXPECT_EQ(a.output.find("SyncBatchNorm"), std::string::npos) << "one process: nothing to sync";
  auto b = run_command(train_cnn(2, args + " --sync-bn true", two));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("SyncBatchNorm: BatchNorm statistics over the 2 processes"),
            std::string::npos)
      << b.output;
  const double synced = gradients_apart(one / ckpt(1), two / ckpt(1));
  // Rounding only: 3e-7 with GCC's optimised build; BatchNorm's float32 sums in another order
  // (a build without vectorisation) move it by up to 1e-3.
  EXPECT_LE(synced, 1e-3) << "2 processes with SyncBatchNorm vs 1, the same global batch";
  auto s1 = load_checkpoint((one / ckpt(1)).string()),
       s2 = load_checkpoint((two / ckpt(1)).string());
  for (size_t i = 0; i < s1.model.size(); ++i)  // the running stats too: the whole batch's
    EXPECT_LE(max(abs(s1.model[i].second - s2.model[i].second)).item(), 1e-4) << s1.model[i].first;
  // Without it each rank normalises its 8 images alone: the gradients part (what --sync-bn is
  // for), so the comparison above can tell.
  auto c = run_command(train_cnn(2, args, plain));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_GT(gradients_apart(one / ckpt(1), plain / ckpt(1)), 0.1);
  for (const auto& p : {one, two, plain}) fs::remove_all(p);
}
#endif

TEST(TrainCnnModels, CosineScheduleResumesWhereTheStraightRunGoes) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path straight = fresh_temp_dir("cnn_cos_s"), split = fresh_temp_dir("cnn_cos_r");
  const std::string args =
      "--model vit --batch-size 16 --optimizer adamw --lr 2e-3 --lr-schedule cosine --warmup 2 "
      "--checkpoint-every 3";
  auto a = run_command(train_cnn(1, args + " --max-steps 6", straight));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_command(train_cnn(1, args + " --max-steps 3", split));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto c = run_command(train_cnn(1, args + " --max-steps 6 --resume", split));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto s = load_checkpoint((split / ckpt(6)).string());
  EXPECT_EQ(s.extra_int("scheduler_step"), 6);
  Distance d = distance(straight / ckpt(6), split / ckpt(6), straight / ckpt(3));
  EXPECT_EQ(d.apart, 0.0) << "resumed run vs straight run";
  EXPECT_GT(d.moved, 1e-4);
  fs::remove_all(straight);
  fs::remove_all(split);
}
